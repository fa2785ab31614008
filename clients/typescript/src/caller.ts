// One logical call to the daemon fleet: the endpoint by rendezvous routing, the tries,
// the deadline, which failures are retried, and the channels (the Rust client's
// `call`, on @grpc/grpc-js).
//
// Resilience never becomes a bypass (docs/client.md, "Every outcome"):
// - only transport failures are retried, at most `maxRetries` times, within the retry
//   budget and the call deadline; every try sends the same bytes, so the same
//   `attempt_id`, and a retried attempt is counted once;
// - answers from the daemon (reject, RESOURCE_EXHAUSTED, UNAVAILABLE it sent, ...)
//   are never retried and never count against an endpoint's health;
// - `callTimeoutMs` bounds a whole call, retries included; each try sends the time
//   left as `grpc-timeout`; a try cut off by it is not retried but counts as a
//   transport failure (a daemon that never answers must be ejected).
// - a try that failed for TLS (the daemon refused this client's certificate, or this
//   client the daemon's) carries the reason grpc-js reported (tls.ts) as the failure's
//   `message`; it is still a transport failure, retried and counted as every other.
// Nothing here logs, and no error here quotes a request field.

import * as grpc from '@grpc/grpc-js';

import { Failure } from './answer';
import { ClientEvent, GovernorMethod, Settings } from './config';
import { Pool, RetryBudget, monotonicMs } from './pool';
import { TlsSide, tlsRefusal } from './tls';
import { TraceContext, traceHeaders } from './trace';
import { Method, MethodName, RequestInit, Response } from './wire';

/** How one logical call ended: the daemon's answer, or a failure (a deny). */
export type Outcome<T> = { kind: 'ok'; value: T } | Failure;

interface Endpoint {
  url: string;
  target: string;
  client: grpc.Client;
  /** For an `https://` endpoint: what explaining a TLS failure needs. */
  tls: TlsSide | undefined;
}

/** Counters and health now. */
export interface ClientStats {
  calls: number;
  retries: number;
  transportFailures: number;
  breakerDenials: number;
  breakerOpen: boolean;
  healthy: boolean[];
}

const passThrough = (value: Buffer): Buffer => value;

/** The calls of one client: its channels, pool, retry budget and counters. */
export class Caller {
  private readonly pool: Pool;
  private readonly budget: RetryBudget;
  private readonly endpoints: Endpoint[];
  private readonly retired = new Set<grpc.Client>();
  private closed = false;
  private calls = 0;
  private retries = 0;
  private transportFailures = 0;
  private breakerDenials = 0;

  constructor(private readonly settings: Settings) {
    this.endpoints = settings.targets.map(({ url, target }) => ({
      url,
      target,
      client: this.channel(target),
      tls: settings.tls && { identity: settings.tls.identity, serverName: settings.tls.domainName ?? new URL(url).hostname },
    }));
    this.pool = new Pool(
      this.endpoints.map((e) => e.url),
      {
        ejectAfter: settings.ejectAfter,
        ejectForMs: settings.ejectForMs,
        ejectMaxMs: settings.ejectMaxMs,
        probeTimeoutMs: settings.connectTimeoutMs + settings.callTimeoutMs,
      },
      monotonicMs,
      (index) => this.emit({ type: 'ejected', endpoint: this.endpoints[index].url }),
    );
    this.budget = new RetryBudget(settings.retryBudgetRatio, settings.retryBudgetReserve);
  }

  /** The endpoint a call routed by `routeKey` would go to now; `undefined` when the breaker is open. */
  route(routeKey: string): string | undefined {
    return this.pool.route(routeKey);
  }

  /** Counters and health now. */
  stats(): ClientStats {
    return {
      calls: this.calls,
      retries: this.retries,
      transportFailures: this.transportFailures,
      breakerDenials: this.breakerDenials,
      breakerOpen: this.pool.breakerOpen(),
      healthy: this.pool.healthy(),
    };
  }

  /** Closes every channel. Calls after this fail as transport failures (retryable denies). */
  close(): void {
    this.closed = true;
    for (const e of this.endpoints) e.client.close();
    for (const c of this.retired) c.close();
    this.retired.clear();
  }

  /**
   * One logical call of `m`: endpoints in rendezvous order for `route`, retrying
   * transport failures only, within the budget and the call deadline. Never throws.
   */
  async call<M extends MethodName>(
    m: Method<M>,
    route: string,
    request: RequestInit<M>,
    trace: TraceContext,
  ): Promise<Outcome<Response<M>>> {
    this.calls += 1;
    this.budget.deposit();
    if (this.closed) {
      return { kind: 'transport' };
    }
    const name = m.name as GovernorMethod;
    const illFormed = illFormedField(request);
    if (illFormed !== undefined) {
      return this.badInput(name, illFormed);
    }
    let payload: Buffer;
    let headers: Array<[string, string]>;
    try {
      // Encoded once: every try sends the same bytes, the same attempt_id.
      payload = m.encode(request);
      headers = traceHeaders(trace);
    } catch {
      // Input the wire cannot carry is the gateway's bug: a deny, not retryable. The
      // error is not passed on: it could quote a field.
      return { kind: 'bad_input', field: undefined };
    }
    if (this.settings.bearer !== undefined) {
      headers.push(['authorization', this.settings.bearer]);
    }
    try {
      const deadline = monotonicMs() + this.settings.callTimeoutMs;
      const tried: number[] = [];
      let last: Failure | undefined;
      for (;;) {
        const pick = this.pool.pick(route, tried);
        if (pick === undefined) {
          if (tried.length === 0) {
            this.breakerDenials += 1;
            this.emit({ type: 'breaker_denial', method: name });
            return { kind: 'breaker_open' };
          }
          // No endpoint left for a retry: the last try's failure (and its explanation).
          return last?.kind === 'transport' ? last : { kind: 'transport' };
        }
        tried.push(pick);
        const outcome = await this.tryOnce(pick, m, payload, deadline, headers);
        if (outcome.kind === 'ok' || outcome.kind === 'answered') {
          this.pool.answered(pick);
          return outcome;
        }
        this.transportFailures += 1;
        this.pool.failed(pick);
        last = outcome;
        const message = outcome.kind === 'transport' ? outcome.message : undefined;
        this.emit({
          type: 'transport_failure',
          method: name,
          endpoint: this.endpoints[pick].url,
          timeout: outcome.kind === 'timeout',
          ...(message === undefined ? {} : { message }),
        });
        const retry =
          outcome.kind === 'transport' && tried.length <= this.settings.maxRetries && monotonicMs() < deadline && this.budget.withdraw();
        if (!retry) {
          return outcome;
        }
        this.retries += 1;
        this.emit({ type: 'retry', method: name, retries: tried.length });
      }
    } finally {
      // The encoded request holds the password on Verify and CheckPassword.
      payload.fill(0);
    }
  }

  /**
   * One try on endpoint `index`, cut off at `deadline` (monotonic ms). A
   * `DEADLINE_EXCEEDED` in gRPC's own words (`GRPC_DEADLINE_DETAILS`), or once the
   * deadline passed, is this try's timeout, headers or not. A status counts
   * as the daemon's answer only when it came from the daemon: with response headers,
   * or in a trailers-only response (whose headers grpc-js hands back as the status's
   * metadata: at least `content-type`). A status grpc-js made up from a refused,
   * reset or garbled connection has neither, and is a transport failure, whatever its
   * code (grpc-js reports those as UNAVAILABLE, INTERNAL, CANCELLED ...); on an
   * `https://` endpoint, its details may say why the TLS connection failed, which
   * becomes the failure's `message`. An answer that does not decode is INTERNAL from
   * the daemon: a deny, not retried.
   */
  private tryOnce<M extends MethodName>(
    index: number,
    m: Method<M>,
    payload: Buffer,
    deadline: number,
    headers: Array<[string, string]>,
  ): Promise<Outcome<Response<M>>> {
    const endpoint = this.endpoints[index];
    const client = endpoint.client;
    return new Promise<Outcome<Response<M>>>((resolve) => {
      const left = deadline - monotonicMs();
      if (left <= 0) {
        resolve({ kind: 'timeout' });
        return;
      }
      let settled = false;
      let deadlineTimer: NodeJS.Timeout | undefined;
      let connectTimer: NodeJS.Timeout | undefined;
      let call: grpc.ClientUnaryCall | undefined;
      const finish = (outcome: Outcome<Response<M>>): void => {
        if (settled) return;
        settled = true;
        clearTimeout(deadlineTimer);
        clearTimeout(connectTimer);
        if (outcome.kind === 'transport') {
          this.renew(endpoint, client);
        }
        resolve(outcome);
      };
      let sawHeaders = false;
      const metadata = new grpc.Metadata();
      for (const [k, v] of headers) metadata.set(k, v);
      try {
        call = client.makeUnaryRequest<Buffer, Buffer>(
          m.path,
          passThrough,
          passThrough,
          payload,
          metadata,
          { deadline: new Date(Date.now() + left) },
          (err, value) => {
            if (err === null || err === undefined) {
              finish(decoded(m, value));
            } else if (
              err.code === grpc.status.DEADLINE_EXCEEDED &&
              (monotonicMs() >= deadline || String(err.details).toLowerCase() === GRPC_DEADLINE_DETAILS)
            ) {
              // The deadline this try sent ran out at the endpoint: grpc-js's server
              // sends this status (with headers) from its own timer, which may fire
              // before ours. It is our timeout, not an answer.
              finish({ kind: 'timeout' });
            } else if (sawHeaders || Object.keys(err.metadata?.getMap() ?? {}).length > 0) {
              finish(answeredStatus(err.code, err.details, m.fields));
            } else if (err.code === grpc.status.DEADLINE_EXCEEDED || monotonicMs() >= deadline) {
              finish({ kind: 'timeout' });
            } else {
              finish(transportFailure(endpoint, err.details));
            }
          },
        );
        call.on('metadata', () => {
          sawHeaders = true;
        });
      } catch {
        finish({ kind: 'transport' });
        return;
      }
      deadlineTimer = setTimeout(() => {
        finish({ kind: 'timeout' });
        call?.cancel();
      }, left);
      const channel = client.getChannel();
      if (channel.getConnectivityState(false) !== grpc.connectivityState.READY) {
        // A connect that takes longer than connectTimeoutMs is a transport failure (retried).
        connectTimer = setTimeout(
          () => {
            if (channel.getConnectivityState(false) !== grpc.connectivityState.READY) {
              finish({ kind: 'transport' });
              call?.cancel();
            }
          },
          Math.min(this.settings.connectTimeoutMs, left),
        );
      }
    });
  }

  /**
   * A call refused before it was sent: `field` (its wire name) cannot be sent as given.
   * Reported through `onEvent` (the method and the field's name, never its value).
   */
  badInput(method: GovernorMethod, field: string): Failure {
    this.emit({ type: 'bad_input', method, field });
    return { kind: 'bad_input', field };
  }

  private channel(target: string): grpc.Client {
    return new grpc.Client(target, this.settings.credentials, this.settings.channelOptions);
  }

  private emit(event: ClientEvent): void {
    const hook = this.settings.onEvent;
    if (hook === undefined) return;
    try {
      hook(event);
    } catch {
      // A hook's failure changes no answer.
    }
  }

  /**
   * After a transport failure the endpoint gets a fresh channel, so its next try
   * connects anew at once (as tonic's channel does) instead of failing fast through
   * grpc-js's reconnect back-off; the old one is closed once no call can still be on it.
   */
  private renew(endpoint: Endpoint, failed: grpc.Client): void {
    if (this.closed || endpoint.client !== failed) {
      return;
    }
    endpoint.client = this.channel(endpoint.target);
    this.retired.add(failed);
    setTimeout(() => {
      this.retired.delete(failed);
      failed.close();
    }, this.settings.callTimeoutMs + 1000).unref();
  }
}

/** A transport failure, with the reason a TLS connection failed when grpc-js's `details` tell it. */
function transportFailure(endpoint: Endpoint, details: unknown): Failure {
  const message = endpoint.tls === undefined ? undefined : tlsRefusal(details, endpoint.tls);
  return message === undefined ? { kind: 'transport' } : { kind: 'transport', message };
}

/**
 * The details gRPC's own servers (grpc-js, gRPC core; compared in lower case) send with
 * `DEADLINE_EXCEEDED` when the `grpc-timeout` a call sent ran out: the call's own
 * deadline, not a daemon's answer. The Python client reads the same wording.
 */
const GRPC_DEADLINE_DETAILS = 'deadline exceeded';

/**
 * The wire name (`account.identifier`, `stored_hash`) of the first string field of
 * `request` that is not well-formed UTF-16: a lone surrogate, which UTF-8 encoding
 * would turn into U+FFFD, so that `'x\uD800'` and `'x\uFFFD'` would send the same
 * bytes. `undefined` when every string can be sent as it is.
 */
export function illFormedField(request: object, prefix = ''): string | undefined {
  for (const [key, value] of Object.entries(request)) {
    const field = prefix + key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
    if (typeof value === 'string') {
      if (!value.isWellFormed()) return field;
    } else if (typeof value === 'object' && value !== null && !ArrayBuffer.isView(value)) {
      const inner = illFormedField(value as object, `${field}.`);
      if (inner !== undefined) return inner;
    }
  }
  return undefined;
}

/**
 * A status the daemon sent. An INVALID_ARGUMENT's message begins with the request field
 * it refuses (`stored_hash has an unsupported format: …`, `account.realm is not a
 * configured realm`): when that first word is one of the request's `fields`, it is
 * kept as `field`; the rest of the message is not.
 */
export function answeredStatus(code: grpc.status, details: unknown, fields: ReadonlySet<string>): Outcome<never> {
  if (code === grpc.status.INVALID_ARGUMENT && typeof details === 'string') {
    const first = /^\S+/.exec(details)?.[0];
    if (first !== undefined && fields.has(first)) return { kind: 'answered', code, field: first };
  }
  return { kind: 'answered', code };
}

/** The answer's message, or INTERNAL (a deny) for bytes that are none. */
function decoded<M extends MethodName>(m: Method<M>, value: Buffer | undefined): Outcome<Response<M>> {
  if (value === undefined) {
    return { kind: 'answered', code: grpc.status.INTERNAL };
  }
  try {
    return { kind: 'ok', value: m.decode(value) };
  } catch {
    return { kind: 'answered', code: grpc.status.INTERNAL };
  }
}
