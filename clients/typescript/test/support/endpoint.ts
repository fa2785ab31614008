// Fault-injecting endpoints for the conformance table: a @grpc/grpc-js server that
// answers a case's message fields (encoded here by hand, so enum values the proto does
// not name reach the client as sent), sends a status, delays, or has its connection
// reset by a TCP proxy in front of it once the request arrived; a closed port; a raw
// TCP server that writes bytes that are not HTTP/2; a TCP server that never speaks.

import * as net from 'node:net';
import * as grpc from '@grpc/grpc-js';
import { fromBinary } from '@bufbuild/protobuf';
import type { DescMessage } from '@bufbuild/protobuf';

import { Governor } from '../../src/gen/portcullis/v1/governor_pb';

/** The Governor's methods by gRPC name (`Verify`), from the generated service. */
const METHODS: Record<string, { input: DescMessage; output: DescMessage }> = Object.fromEntries(
  Governor.methods.map((m) => [m.name, { input: m.input, output: m.output }]),
);

/** Response field numbers of `methodName`, by the proto's field names (`step_up`). */
function fieldNumbers(methodName: string): Record<string, number> {
  return Object.fromEntries(METHODS[methodName].output.fields.map((f) => [f.name, f.number]));
}

function varint(n: number): number[] {
  const out: number[] = [];
  let v = BigInt.asUintN(64, BigInt(n));
  do {
    let byte = Number(v & 0x7fn);
    v >>= 7n;
    if (v !== 0n) byte |= 0x80;
    out.push(byte);
  } while (v !== 0n);
  return out;
}

/** Encodes `answer` as the method's response message, field by field, values as given. */
export function encodeAnswer(methodName: string, answer: Record<string, unknown>): Buffer {
  const numbers = fieldNumbers(methodName);
  const bytes: number[] = [];
  for (const [name, value] of Object.entries(answer)) {
    const field = numbers[name];
    if (field === undefined) throw new Error(`no field ${name} in ${methodName}'s answer`);
    if (typeof value === 'string') {
      const s = Buffer.from(value, 'utf8');
      bytes.push(...varint((field << 3) | 2), ...varint(s.length), ...s);
    } else if (typeof value === 'number' || typeof value === 'boolean') {
      bytes.push(...varint((field << 3) | 0), ...varint(Number(value)));
    } else {
      throw new Error(`cannot encode ${name}`);
    }
  }
  return Buffer.from(bytes);
}

/** What the endpoint saw of one request. */
export interface Seen {
  method: string;
  attemptId: string | undefined;
  /** The request's `flow` (RecordFlowAttempt, ClearFlow), a number. */
  flow: number | undefined;
  traceparent: string | undefined;
  tracestate: string | undefined;
  authorization: string | undefined;
}

export interface Fault {
  status?: number;
  /** The status's details (default: `injected by the conformance endpoint`). */
  details?: string;
  reset?: boolean;
  delay_ms?: number;
  unreachable?: boolean;
  garbage?: boolean;
}

export interface Behaviour {
  answer?: Record<string, unknown>;
  fault?: Fault;
  /** Send response headers before the status (a status that follows headers). */
  headersFirst?: boolean;
}

export interface Endpoint {
  /** `http://127.0.0.1:PORT` */
  url: string;
  port: number;
  seen: Seen[];
  /** TCP connections accepted (proxy or raw servers; undefined where not counted). */
  connections: () => number;
  close: () => Promise<void>;
}

function lateAnswer(methodName: string): Record<string, unknown> {
  // What a late answer says: an allow, which must not reach the caller after the deadline.
  switch (methodName) {
    case 'Verify':
      return { verdict: 1 };
    case 'ClearAttempts':
    case 'ClearFlow':
      return {};
    case 'CheckPassword':
      return { reason: 1 };
    case 'ConfirmDevice':
      return { device_token: 'late-device-token' };
    default:
      return { decision: 1 };
  }
}

/** A free port nothing listens on (bound, then closed). */
export async function closedPort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

/** A TCP proxy to `127.0.0.1:upstreamPort` that can reset every connection it holds. */
export async function startProxy(upstreamPort: number, listenPort = 0) {
  const pairs = new Set<{ down: net.Socket; up: net.Socket }>();
  let connections = 0;
  const server = net.createServer((down) => {
    connections += 1;
    const up = net.connect(upstreamPort, '127.0.0.1');
    const pair = { down, up };
    pairs.add(pair);
    down.on('error', () => {});
    up.on('error', () => {});
    down.pipe(up);
    up.pipe(down);
    const end = () => {
      pairs.delete(pair);
      down.destroy();
      up.destroy();
    };
    down.on('close', end);
    up.on('close', end);
  });
  await new Promise<void>((r) => server.listen(listenPort, '127.0.0.1', r));
  return {
    port: (server.address() as net.AddressInfo).port,
    connections: () => connections,
    resetAll: () => {
      for (const { down, up } of pairs) {
        down.resetAndDestroy();
        up.destroy();
      }
      pairs.clear();
    },
    close: () =>
      new Promise<void>((r) => {
        for (const { down, up } of pairs) {
          down.destroy();
          up.destroy();
        }
        server.close(() => r());
      }),
  };
}

/** A raw TCP server: writes `reply` (bytes that are not HTTP/2) on connect, or nothing when `reply` is undefined. */
export async function startRawServer(reply: Buffer | undefined): Promise<Endpoint> {
  const sockets = new Set<net.Socket>();
  let connections = 0;
  const server = net.createServer((s) => {
    connections += 1;
    sockets.add(s);
    s.on('error', () => {});
    s.on('close', () => sockets.delete(s));
    if (reply !== undefined) {
      s.write(reply);
      s.on('data', () => s.write(reply));
    }
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as net.AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    seen: [],
    connections: () => connections,
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}

export const GARBAGE = Buffer.from('HTTP/1.1 400 Bad Request\r\nContent-Length: 11\r\n\r\nnot grpc\r\n\x00\xff\xfe\x01garbage', 'latin1');

/** A gRPC endpoint (behind a resetting proxy listening on `port`) that behaves as `behaviour` says for every Governor method. */
export async function startGrpcEndpoint(behaviour: Behaviour, port = 0): Promise<Endpoint> {
  const seen: Seen[] = [];
  const timers = new Set<NodeJS.Timeout>();
  const server = new grpc.Server();
  let proxy: Awaited<ReturnType<typeof startProxy>> | undefined;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const definition: Record<string, grpc.MethodDefinition<any, any>> = {};
  const handlers: grpc.UntypedServiceImplementation = {};
  for (const [name, m] of Object.entries(METHODS)) {
    definition[name] = {
      path: `/${Governor.typeName}/${name}`,
      requestStream: false,
      responseStream: false,
      requestDeserialize: (bytes: Buffer) => fromBinary(m.input, bytes) as Record<string, unknown>,
      requestSerialize: () => Buffer.alloc(0),
      responseSerialize: (value: Buffer) => value,
      responseDeserialize: (value: Buffer) => value,
    };
    handlers[name] = (call: grpc.ServerUnaryCall<Record<string, unknown>, Buffer>, callback: grpc.sendUnaryData<Buffer>) => {
      const md = call.metadata.getMap();
      seen.push({
        method: name,
        attemptId: typeof call.request['attemptId'] === 'string' ? call.request['attemptId'] : undefined,
        flow: typeof call.request['flow'] === 'number' ? call.request['flow'] : undefined,
        traceparent: md['traceparent'] as string | undefined,
        tracestate: md['tracestate'] as string | undefined,
        authorization: md['authorization'] as string | undefined,
      });
      const fault = behaviour.fault ?? {};
      if (fault.reset) {
        proxy?.resetAll();
        return;
      }
      if (fault.delay_ms !== undefined) {
        const t = setTimeout(() => {
          timers.delete(t);
          callback(null, encodeAnswer(name, lateAnswer(name)));
        }, fault.delay_ms);
        timers.add(t);
        return;
      }
      if (behaviour.headersFirst) {
        call.sendMetadata(new grpc.Metadata());
      }
      if (fault.status !== undefined) {
        callback({ code: fault.status, details: fault.details ?? 'injected by the conformance endpoint' });
        return;
      }
      callback(null, encodeAnswer(name, behaviour.answer ?? {}));
    };
  }
  server.addService(definition as grpc.ServiceDefinition, handlers);
  const bound = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  proxy = await startProxy(bound, port);
  const p = proxy;
  return {
    url: `http://127.0.0.1:${p.port}`,
    port: p.port,
    seen,
    connections: p.connections,
    close: async () => {
      for (const t of timers) clearTimeout(t);
      await p.close();
      server.forceShutdown();
    },
  };
}

/** The endpoint a conformance case describes. */
export async function startCaseEndpoint(behaviour: Behaviour): Promise<Endpoint> {
  const fault = behaviour.fault ?? {};
  if (fault.unreachable) {
    const port = await closedPort();
    return { url: `http://127.0.0.1:${port}`, port, seen: [], connections: () => 0, close: async () => {} };
  }
  if (fault.garbage) {
    return startRawServer(GARBAGE);
  }
  return startGrpcEndpoint(behaviour);
}
