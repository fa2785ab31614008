// The client's configuration: its settings and defaults (the Rust client's, in
// camelCase with durations in milliseconds; docs/client.md, "Configuration"), checked
// once, turned into what the channels need. A bad setting throws ClientConfigError
// naming it; no message quotes a secret.

import * as fs from 'node:fs';
import * as grpc from '@grpc/grpc-js';

/** TLS to `https://` endpoints. */
export interface ClientTls {
  /** PEM CA certificate(s) the daemon's certificate must chain to. */
  caFile: string;
  /** PEM client certificate chain, for mutual TLS (with `keyFile`). */
  certFile?: string;
  /** PEM private key of `certFile`. */
  keyFile?: string;
  /** The name the daemon's certificate carries, when it is not the endpoint's host. */
  domainName?: string;
}

/** A Governor method's gRPC name, as events report it. */
export type GovernorMethod =
  'Admit' | 'RecordAttempt' | 'Verify' | 'ClearAttempts' | 'CheckPassword' | 'RecordFlowAttempt' | 'ClearFlow' | 'ConfirmDevice';

/** What the client reports through `onEvent`: names and counts only. */
export type ClientEvent =
  /** A try that got no answer; `message` as on `Failure` (`'TLS handshake refused: …'`) when the client can tell why. */
  | { type: 'transport_failure'; method: GovernorMethod; endpoint: string; timeout: boolean; message?: string }
  | { type: 'retry'; method: GovernorMethod; retries: number }
  | { type: 'ejected'; endpoint: string }
  | { type: 'breaker_denial'; method: GovernorMethod }
  /** A call not sent: `field` (a wire name, never its value) cannot be sent as given (a denied call). */
  | { type: 'bad_input'; method: GovernorMethod; field: string };

/** Client configuration (docs/client.md, "Configuration"; the same defaults). Durations in milliseconds. */
export interface ClientConfig {
  /** Daemon URLs, `http://host:port` or `https://host:port` (default `['http://127.0.0.1:50051']`). */
  endpoints?: string[];
  /** Deadline of one call, retries included (default 2000). */
  callTimeoutMs?: number;
  /** Deadline of one connect (default 500). */
  connectTimeoutMs?: number;
  /** Most retries of one call after transport failures, 0–10 (default 2). */
  maxRetries?: number;
  /** Retries as a fraction of calls in the long run, 0.0–1.0 (default 0.2). */
  retryBudgetRatio?: number;
  /** Retries allowed in a burst beyond the ratio (default 10). */
  retryBudgetReserve?: number;
  /** Consecutive transport failures that eject an endpoint (default 3). */
  ejectAfter?: number;
  /** First ejection's length; doubles after each failed probe (default 5000). */
  ejectForMs?: number;
  /** Longest ejection (default 60000). */
  ejectMaxMs?: number;
  /**
   * How long a connection may be quiet before the client sends an HTTP/2 PING to check
   * it is still alive (`grpc.keepalive_time_ms`; default 30000, at least 1000). A proxy
   * in front of the daemon must permit pings this often.
   */
  keepaliveTimeMs?: number;
  /**
   * How long the client waits for a PING's answer before it closes the connection and
   * the next call connects anew (`grpc.keepalive_timeout_ms`; default 10000, at least 100).
   */
  keepaliveTimeoutMs?: number;
  /**
   * Whether idle connections (no call in flight) are pinged too
   * (`grpc.keepalive_permit_without_calls`; default true), so a connection a NAT or load
   * balancer dropped while idle is found dead before the next login needs it.
   */
  keepalivePermitWithoutCalls?: boolean;
  /** TLS for `https://` endpoints. */
  tls?: ClientTls;
  /** A file holding this gateway's bearer token, sent as `authorization: Bearer …`. */
  tokenFile?: string;
  /**
   * @deprecated Ignored. The wire types are compiled into the package: no `.proto`
   * file is read at run time.
   */
  protoDir?: string;
  /** Told of transport failures, retries, ejections and breaker denials. Must not throw (if it does, it is ignored). */
  onEvent?: (event: ClientEvent) => void;
}

/** A configuration the client cannot use. The message names the setting, never a secret. */
export class ClientConfigError extends Error {
  constructor(
    readonly setting: string,
    message: string,
  ) {
    super(`client.${setting} ${message}`);
    this.name = 'ClientConfigError';
  }
}

/** The defaults, also documented in README.md ("Configuration"). */
export const DEFAULTS = {
  endpoints: ['http://127.0.0.1:50051'],
  callTimeoutMs: 2000,
  connectTimeoutMs: 500,
  maxRetries: 2,
  retryBudgetRatio: 0.2,
  retryBudgetReserve: 10,
  ejectAfter: 3,
  ejectForMs: 5000,
  ejectMaxMs: 60000,
  keepaliveTimeMs: 30000,
  keepaliveTimeoutMs: 10000,
  keepalivePermitWithoutCalls: true,
} as const;

/** One endpoint: the URL as configured and grpc-js's `host:port` target. */
export interface Target {
  url: string;
  target: string;
}

/** A checked configuration, ready for the channels. */
export interface Settings {
  callTimeoutMs: number;
  connectTimeoutMs: number;
  maxRetries: number;
  retryBudgetRatio: number;
  retryBudgetReserve: number;
  ejectAfter: number;
  ejectForMs: number;
  ejectMaxMs: number;
  targets: Target[];
  credentials: grpc.ChannelCredentials;
  channelOptions: grpc.ChannelOptions;
  /** For `https://` endpoints: whether a client certificate is configured, and `tls.domainName`. */
  tls: { identity: boolean; domainName: string | undefined } | undefined;
  bearer: string | undefined;
  onEvent: ((event: ClientEvent) => void) | undefined;
}

/** The largest timer Node keeps (about 24.8 days): a longer one fires at once. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Checks `config` and fills in the defaults.
 * @throws ClientConfigError for an empty or invalid endpoint list, an out-of-range setting, an unreadable file.
 */
export function resolveConfig(config: ClientConfig): Settings {
  const num = (setting: keyof ClientConfig, ok: (v: number) => boolean, allowed: string): number => {
    const v = config[setting] ?? DEFAULTS[setting as keyof typeof DEFAULTS];
    if (typeof v !== 'number' || !Number.isFinite(v) || !ok(v)) {
      throw new ClientConfigError(setting, `is out of range: allowed ${allowed}`);
    }
    return v;
  };
  const whole = (v: number) => Number.isInteger(v);
  const ms = (min: number) => (v: number) => v >= min && v <= MAX_TIMER_MS;
  const ejectForMs = num('ejectForMs', ms(1), `${1}–${MAX_TIMER_MS}`);
  const settings = {
    callTimeoutMs: num('callTimeoutMs', ms(1), `1–${MAX_TIMER_MS}`),
    connectTimeoutMs: num('connectTimeoutMs', ms(1), `1–${MAX_TIMER_MS}`),
    maxRetries: num('maxRetries', (v) => whole(v) && v >= 0 && v <= 10, '0–10'),
    retryBudgetRatio: num('retryBudgetRatio', (v) => v >= 0 && v <= 1, '0.0–1.0'),
    retryBudgetReserve: num('retryBudgetReserve', (v) => whole(v) && v >= 0, 'a whole number, 0 or more'),
    ejectAfter: num('ejectAfter', (v) => whole(v) && v >= 1, 'at least 1'),
    ejectForMs,
    ejectMaxMs: num('ejectMaxMs', (v) => v >= ejectForMs && v <= MAX_TIMER_MS, 'at least ejectForMs'),
  };
  const keepaliveTimeMs = num('keepaliveTimeMs', (v) => whole(v) && ms(1000)(v), `a whole number, 1000–${MAX_TIMER_MS}`);
  const keepaliveTimeoutMs = num('keepaliveTimeoutMs', (v) => whole(v) && ms(100)(v), `a whole number, 100–${MAX_TIMER_MS}`);
  const permit = config.keepalivePermitWithoutCalls ?? DEFAULTS.keepalivePermitWithoutCalls;
  if (typeof permit !== 'boolean') {
    throw new ClientConfigError('keepalivePermitWithoutCalls', 'must be true or false');
  }
  const { targets, secure } = parseEndpoints(config.endpoints ?? [...DEFAULTS.endpoints]);
  const channelOptions: grpc.ChannelOptions = {
    // Retries are this client's, counted against its budget: none by grpc-js itself.
    'grpc.enable_retries': 0,
    // Each endpoint's channel has its own connection, renewed after a transport failure.
    'grpc.use_local_subchannel_pool': 1,
    'grpc.service_config_disable_resolution': 1,
    // Every answer is a few bytes: a hostile endpoint cannot make us buffer much.
    'grpc.max_receive_message_length': 64 * 1024,
    // A connection that stops answering (a NAT or load balancer dropped the flow, the
    // daemon's host froze) is found by an unanswered PING and closed, so the next call
    // connects anew instead of timing out on it until the OS gives up (README.md,
    // "Keepalive").
    'grpc.keepalive_time_ms': keepaliveTimeMs,
    'grpc.keepalive_timeout_ms': keepaliveTimeoutMs,
    'grpc.keepalive_permit_without_calls': permit ? 1 : 0,
  };
  const credentials = secure ? tlsCredentials(config.tls, channelOptions) : grpc.credentials.createInsecure();
  return {
    ...settings,
    targets,
    credentials,
    channelOptions,
    tls: secure ? { identity: config.tls?.certFile !== undefined, domainName: config.tls?.domainName } : undefined,
    bearer: config.tokenFile === undefined ? undefined : readBearer(config.tokenFile),
    onEvent: config.onEvent,
  };
}

function parseEndpoints(endpoints: string[]): { targets: Target[]; secure: boolean } {
  if (!Array.isArray(endpoints) || endpoints.length === 0) {
    throw new ClientConfigError('endpoints', 'is empty');
  }
  const schemes = new Set<string>();
  const targets = endpoints.map((url, index) => {
    const invalid = new ClientConfigError(`endpoints[${index}]`, 'is not a valid URL (write http://HOST:PORT or https://HOST:PORT)');
    let u: URL;
    try {
      u = new URL(url);
    } catch {
      throw invalid;
    }
    if ((u.protocol !== 'http:' && u.protocol !== 'https:') || u.hostname === '' || (u.pathname !== '/' && u.pathname !== '')) {
      throw invalid;
    }
    schemes.add(u.protocol);
    const port = u.port || (u.protocol === 'https:' ? '443' : '80');
    return { url, target: `${u.hostname}:${port}` };
  });
  if (schemes.size > 1) {
    throw new ClientConfigError('endpoints', 'mixes http:// and https://; use one scheme for all');
  }
  return { targets, secure: schemes.has('https:') };
}

function readFile(setting: string, file: string): Buffer {
  try {
    return fs.readFileSync(file);
  } catch (e) {
    throw new ClientConfigError(setting, `could not be read (${(e as NodeJS.ErrnoException).code ?? 'error'})`);
  }
}

function tlsCredentials(tls: ClientTls | undefined, channelOptions: grpc.ChannelOptions): grpc.ChannelCredentials {
  if ((tls?.certFile === undefined) !== (tls?.keyFile === undefined)) {
    throw new ClientConfigError('tls.cert_file', 'and tls.key_file go together');
  }
  const read = (setting: string, file: string | undefined) => (file === undefined ? null : readFile(setting, file));
  const credentials = grpc.credentials.createSsl(
    read('tls.ca_file', tls?.caFile),
    read('tls.key_file', tls?.keyFile),
    read('tls.cert_file', tls?.certFile),
  );
  if (tls?.domainName !== undefined) {
    channelOptions['grpc.ssl_target_name_override'] = tls.domainName;
    channelOptions['grpc.default_authority'] = tls.domainName;
  }
  return credentials;
}

function readBearer(file: string): string {
  const token = readFile('token_file', file)
    .toString('utf8')
    .replace(/\r?\n$/, '');
  if (!/^[\x21-\x7e]+$/.test(token)) {
    throw new ClientConfigError('token_file', 'is not a usable token (one line of visible ASCII)');
  }
  return `Bearer ${token}`;
}
