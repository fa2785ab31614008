// The gateway's handle to the daemon fleet: the same client as the Rust one
// (client/src/lib.rs), on @grpc/grpc-js.
//
// Whatever goes wrong between gateway and daemon (a refused or reset connection, a
// timeout, bytes that are not HTTP/2, an open breaker, an error status, an unknown or
// unspecified enum value) arrives as a deny. No method throws or rejects: there is no
// third outcome for a caller to mishandle. `retryable` only tells a user interface
// whether to say "try again later" (503) instead of "wrong credentials" (401). A
// `verify` whose password was right but needs a challenge or a password change is a
// deny too, of its own `kind` (`'challenge'`, `'change_required'`): only `'allow'`
// logs in.
//
// Resilience never becomes a bypass (docs/client.md, "Every outcome"):
// - only transport failures are retried, at most `maxRetries` times, within the retry
//   budget and the call deadline, always with the same `attempt_id` (generated here
//   when the caller gives none), so a retried attempt is counted once;
// - answers from the daemon (reject, RESOURCE_EXHAUSTED, UNAVAILABLE it sent, ...)
//   are never retried and never count against an endpoint's health;
// - `callTimeoutMs` bounds a whole call, retries included; each try sends the time
//   left as `grpc-timeout`; a try cut off by it is not retried but counts as a
//   transport failure (a daemon that never answers must be ejected).
//
// Nothing here logs. The optional `onEvent` hook gets method and endpoint names and
// counts, never a request field: no password, hash, identifier or token can reach a
// log through it, and no error message here holds any of them.

import { randomUUID } from 'node:crypto';
import * as fs from 'node:fs';
import * as grpc from '@grpc/grpc-js';

import {
  Answer,
  CHALLENGE_REASON_NEW_DEVICE,
  DECISION_ALLOW,
  Failure,
  PasswordCheck,
  VERDICT_ACCEPT,
  VERDICT_CHALLENGE,
  VERDICT_CHANGE_REQUIRED,
  failureAnswer,
  failureRetryable,
} from './answer';
import { Pool, RetryBudget, monotonicMs } from './pool';
import { GovernorMethod, Method, defaultProtoDir, loadPackage, method } from './proto';
import { TraceContext, traceHeaders } from './trace';

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

/** What the client reports through `onEvent`: names and counts only. */
export type ClientEvent =
  | { type: 'transport_failure'; method: GovernorMethod; endpoint: string; timeout: boolean }
  | { type: 'retry'; method: GovernorMethod; retries: number }
  | { type: 'ejected'; endpoint: string }
  | { type: 'breaker_denial'; method: GovernorMethod };

/** Client configuration (docs/client.md, "Configuration"; the same defaults). */
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
  /** TLS for `https://` endpoints. */
  tls?: ClientTls;
  /** A file holding this gateway's bearer token, sent as `authorization: Bearer …`. */
  tokenFile?: string;
  /** The directory holding `portcullis/v1/governor.proto` (default: the repository's proto/). */
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

/** Why a password's record is cleared (docs/architecture.md: nothing else clears it). */
export type ClearReason = 'password_verified' | 'password_reset_completed';

/** Per-call options. */
export interface CallOptions extends TraceContext {}

/**
 * A flow around the login (`portcullis.v1.Flow`; docs/flows.md), each with its own
 * record per account: attempts at a one-time code or a recovery code, requests to send
 * a password-reset or an address-verification mail.
 */
export type Flow = 'second_factor' | 'recovery_code' | 'password_reset' | 'verification_resend';

/** The flows whose record a verified code clears (`clearFlow`); a mail flow's caps are never cleared by a gateway. */
export type CodeFlow = 'second_factor' | 'recovery_code';

/** The inputs of one `confirmDevice`. */
export interface DeviceConfirmation extends TraceContext {
  /** Realm name, as in the `verify` that answered `'challenge'`. */
  realm: string;
  /** The identifier, as in that `verify`. */
  identifier: string;
  /** That answer's `challengeToken`. */
  challengeToken: string;
  /** The stored hash sent with that `verify` (the token vouches for that credential). */
  storedHash: string;
}

/** The inputs of one `verify`. */
export interface Login extends TraceContext {
  /** Realm name. */
  realm: string;
  /** What the user typed to name the account. */
  identifier: string;
  /** What the user typed as the password (a string is sent as UTF-8). */
  password: string | Uint8Array;
  /** The account's stored hash; `''` for an unknown or disabled account. */
  storedHash: string;
  /** The end client's address (see `clientKeyFromForwarded`). */
  clientKey: string;
  /** Idempotency id; generated (a UUID) when absent, and kept across retries. */
  attemptId?: string;
  /** The device token an earlier accept of this account returned to this device. */
  deviceToken?: string;
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

type Outcome = { kind: 'ok'; value: Record<string, unknown> } | Failure;

interface Endpoint {
  url: string;
  target: string;
  client: grpc.Client;
}

const GOVERNOR = 'portcullis.v1.Governor';
const METHODS: GovernorMethod[] = [
  'Admit',
  'RecordAttempt',
  'Verify',
  'ClearAttempts',
  'CheckPassword',
  'RecordFlowAttempt',
  'ClearFlow',
  'ConfirmDevice',
];
const CLEAR_REASONS: Record<ClearReason, number> = { password_verified: 1, password_reset_completed: 2 };
const FLOWS: Record<Flow, number> = { second_factor: 1, recovery_code: 2, password_reset: 3, verification_resend: 4 };

/** The wire value of a name from `table`, or `undefined` for anything else (no inherited keys). */
function wireValue<K extends string>(table: Record<K, number>, name: unknown): number | undefined {
  return typeof name === 'string' && Object.prototype.hasOwnProperty.call(table, name) ? table[name as K] : undefined;
}

function toBuffer(value: Buffer): Buffer {
  return value;
}

/** The gateway's handle to the daemon fleet. Connects lazily; call `close()` when done. */
export class Client {
  private readonly callTimeoutMs: number;
  private readonly connectTimeoutMs: number;
  private readonly maxRetries: number;
  private readonly pool: Pool;
  private readonly budget: RetryBudget;
  private readonly endpoints: Endpoint[];
  private readonly methods: Record<GovernorMethod, Method>;
  private readonly credentials: grpc.ChannelCredentials | undefined;
  private readonly channelOptions: grpc.ChannelOptions;
  private readonly bearer: string | undefined;
  private readonly onEvent: ((event: ClientEvent) => void) | undefined;
  private readonly retired = new Set<grpc.Client>();
  private closed = false;
  private calls = 0;
  private retries = 0;
  private transportFailures = 0;
  private breakerDenials = 0;

  /** @throws ClientConfigError for an empty or invalid endpoint list, an out-of-range setting, an unreadable file. */
  constructor(config: ClientConfig = {}) {
    const endpoints = config.endpoints ?? ['http://127.0.0.1:50051'];
    if (endpoints.length === 0) {
      throw new ClientConfigError('endpoints', 'is empty');
    }
    const num = (setting: keyof ClientConfig, value: number | undefined, fallback: number, ok: (v: number) => boolean, allowed: string): number => {
      const v = value ?? fallback;
      if (typeof v !== 'number' || !Number.isFinite(v) || !ok(v)) {
        throw new ClientConfigError(setting, `is out of range: allowed ${allowed}`);
      }
      return v;
    };
    const whole = (v: number) => Number.isInteger(v);
    this.callTimeoutMs = num('callTimeoutMs', config.callTimeoutMs, 2000, (v) => v >= 1, 'at least 1');
    this.connectTimeoutMs = num('connectTimeoutMs', config.connectTimeoutMs, 500, (v) => v >= 1, 'at least 1');
    this.maxRetries = num('maxRetries', config.maxRetries, 2, (v) => whole(v) && v >= 0 && v <= 10, '0–10');
    const ratio = num('retryBudgetRatio', config.retryBudgetRatio, 0.2, (v) => v >= 0 && v <= 1, '0.0–1.0');
    const reserve = num('retryBudgetReserve', config.retryBudgetReserve, 10, (v) => whole(v) && v >= 0, 'a whole number, 0 or more');
    const ejectAfter = num('ejectAfter', config.ejectAfter, 3, (v) => whole(v) && v >= 1, 'at least 1');
    const ejectForMs = num('ejectForMs', config.ejectForMs, 5000, (v) => v >= 1, 'at least 1');
    const ejectMaxMs = num('ejectMaxMs', config.ejectMaxMs, 60000, (v) => v >= ejectForMs, 'at least ejectForMs');

    const schemes = new Set<string>();
    const parsed = endpoints.map((url, index) => {
      let u: URL;
      try {
        u = new URL(url);
      } catch {
        throw new ClientConfigError(`endpoints[${index}]`, 'is not a valid URL (write http://HOST:PORT or https://HOST:PORT)');
      }
      if ((u.protocol !== 'http:' && u.protocol !== 'https:') || u.hostname === '' || (u.pathname !== '/' && u.pathname !== '')) {
        throw new ClientConfigError(`endpoints[${index}]`, 'is not a valid URL (write http://HOST:PORT or https://HOST:PORT)');
      }
      schemes.add(u.protocol);
      const port = u.port || (u.protocol === 'https:' ? '443' : '80');
      return { url, target: `${u.hostname}:${port}` };
    });
    if (schemes.size > 1) {
      throw new ClientConfigError('endpoints', 'mixes http:// and https://; use one scheme for all');
    }
    const secure = schemes.has('https:');
    this.channelOptions = {
      // Retries are this client's, counted against its budget: none by grpc-js itself.
      'grpc.enable_retries': 0,
      // Each endpoint's channel has its own connection, renewed after a transport failure.
      'grpc.use_local_subchannel_pool': 1,
      'grpc.service_config_disable_resolution': 1,
      // Every answer is a few bytes: a hostile endpoint cannot make us buffer much.
      'grpc.max_receive_message_length': 64 * 1024,
    };
    if (secure) {
      const read = (setting: string, file: string | undefined): Buffer | undefined => {
        if (file === undefined) return undefined;
        try {
          return fs.readFileSync(file);
        } catch (e) {
          throw new ClientConfigError(setting, `could not be read (${(e as NodeJS.ErrnoException).code ?? 'error'})`);
        }
      };
      const tls = config.tls;
      if ((tls?.certFile === undefined) !== (tls?.keyFile === undefined)) {
        throw new ClientConfigError('tls.cert_file', 'and tls.key_file go together');
      }
      this.credentials = grpc.credentials.createSsl(
        read('tls.ca_file', tls?.caFile) ?? null,
        read('tls.key_file', tls?.keyFile) ?? null,
        read('tls.cert_file', tls?.certFile) ?? null,
      );
      if (tls?.domainName !== undefined) {
        this.channelOptions['grpc.ssl_target_name_override'] = tls.domainName;
        this.channelOptions['grpc.default_authority'] = tls.domainName;
      }
    } else {
      this.credentials = undefined;
    }
    if (config.tokenFile !== undefined) {
      let text: string;
      try {
        text = fs.readFileSync(config.tokenFile, 'utf8');
      } catch (e) {
        throw new ClientConfigError('token_file', `could not be read (${(e as NodeJS.ErrnoException).code ?? 'error'})`);
      }
      const token = text.replace(/\r?\n$/, '');
      if (!/^[\x21-\x7e]+$/.test(token)) {
        throw new ClientConfigError('token_file', 'is not a usable token (one line of visible ASCII)');
      }
      this.bearer = `Bearer ${token}`;
    }

    let pkg;
    try {
      pkg = loadPackage(config.protoDir ?? defaultProtoDir());
    } catch (e) {
      throw new ClientConfigError('protoDir', `could not be loaded: ${(e as Error).message}`);
    }
    this.methods = Object.fromEntries(METHODS.map((m) => [m, method(pkg, GOVERNOR, m)])) as Record<GovernorMethod, Method>;
    this.onEvent = config.onEvent;
    this.endpoints = parsed.map(({ url, target }) => ({ url, target, client: this.channel(target) }));
    this.pool = new Pool(
      this.endpoints.map((e) => e.url),
      { ejectAfter, ejectForMs, ejectMaxMs, probeTimeoutMs: this.connectTimeoutMs + this.callTimeoutMs },
      monotonicMs,
      (index) => this.emit({ type: 'ejected', endpoint: this.endpoints[index].url }),
    );
    this.budget = new RetryBudget(ratio, reserve);
  }

  /** `Admit`: is the account key's door open? Never counts. */
  async admit(realm: string, identifier: string, options: CallOptions = {}): Promise<Answer> {
    const r = await this.call('Admit', routeKey(realm, identifier), { account: { realm, identifier } }, options);
    return r.kind === 'ok' ? decisionAnswer(r.value) : failureAnswer(r);
  }

  /**
   * `RecordAttempt`: counts one attempt before the gateway compares the hash itself.
   * `attemptId` makes retries idempotent; one is generated when absent. With a
   * `clientKey`, the attempt also takes a token of the client network's bucket.
   */
  async recordAttempt(
    realm: string,
    identifier: string,
    options: CallOptions & { clientKey?: string; attemptId?: string } = {},
  ): Promise<Answer> {
    const request = {
      account: { realm, identifier },
      attempt_id: options.attemptId ?? randomUUID(),
      client_key: options.clientKey ?? '',
    };
    const r = await this.call('RecordAttempt', routeKey(realm, identifier), request, options);
    if (r.kind !== 'ok') {
      return failureAnswer(r);
    }
    const signals = { stepUp: r.value['step_up'] === true, networkThrottled: r.value['network_throttled'] === true };
    return r.value['decision'] === DECISION_ALLOW ? Answer.allow(signals) : Answer.deny(false, signals);
  }

  /**
   * `Verify`: the whole login check. `storedHash` is `''` for an unknown (or disabled)
   * account. Routed by `clientKey`, so one end client's calls meet one daemon's
   * per-client ceiling. Only VERDICT_ACCEPT allows; every other verdict, known or not,
   * is a deny. VERDICT_CHALLENGE is a deny of kind `'challenge'` carrying
   * `challengeToken` (ask for a second factor, then `confirmDevice`); VERDICT_CHANGE_REQUIRED
   * one of kind `'change_required'` (no session before a password change). Neither
   * carries a device token.
   */
  async verify(login: Login): Promise<Answer> {
    const password = typeof login.password === 'string' ? Buffer.from(login.password, 'utf8') : Buffer.from(login.password);
    const request = {
      account: { realm: login.realm, identifier: login.identifier },
      password,
      stored_hash: login.storedHash,
      client_key: login.clientKey,
      attempt_id: login.attemptId ?? randomUUID(),
      device_token: login.deviceToken ?? '',
    };
    let r: Outcome;
    try {
      r = await this.call('Verify', login.clientKey, request, login);
    } finally {
      // Our copy of the password is wiped (the caller owns `login.password`).
      password.fill(0);
    }
    if (r.kind !== 'ok') {
      return failureAnswer(r);
    }
    const v = r.value;
    const common = {
      spraySuspected: v['spray_suspected'] === true,
      stepUp: v['step_up'] === true,
      networkThrottled: v['network_throttled'] === true,
    };
    const passwordBreached = v['password_breached'] === true;
    switch (v['verdict']) {
      case VERDICT_ACCEPT:
        return Answer.allow({
          ...common,
          needsRehash: v['needs_rehash'] === true,
          deviceToken: nonEmpty(v['device_token']),
          passwordBreached,
        });
      case VERDICT_CHALLENGE: {
        // A deny of its own kind: no device token, whatever the answer held; a
        // challenge without a token is a plain deny (Answer.challenge).
        const reason = v['challenge_reason'] === CHALLENGE_REASON_NEW_DEVICE ? 'new_device' : 'unknown';
        return Answer.challenge(nonEmpty(v['challenge_token']) ?? '', reason, { ...common, passwordBreached });
      }
      case VERDICT_CHANGE_REQUIRED:
        return Answer.changeRequired({ ...common, passwordBreached });
      default:
        // REJECT, UNSPECIFIED and every verdict this client does not know.
        return Answer.deny(false, common);
    }
  }

  /**
   * `ConfirmDevice`, after a `verify` answered `'challenge'` and the gateway's second
   * factor passed (a one-time code counted with `secondFactorAttempt` and verified, or
   * a mailed link followed): exchanges the challenge token for a device token. An allow
   * carries `deviceToken` (set it as the device cookie, then start the session); every
   * failure is a deny without one: FAILED_PRECONDITION (a token that is not valid, is
   * another account's or credential's, or is older than 15 minutes), any other status,
   * an answer without a token, a transport failure.
   */
  async confirmDevice(confirm: DeviceConfirmation): Promise<Answer> {
    const request = {
      account: { realm: confirm.realm, identifier: confirm.identifier },
      challenge_token: confirm.challengeToken,
      stored_hash: confirm.storedHash,
    };
    const r = await this.call('ConfirmDevice', routeKey(confirm.realm, confirm.identifier), request, confirm);
    if (r.kind !== 'ok') {
      return failureAnswer(r);
    }
    const deviceToken = nonEmpty(r.value['device_token']);
    return deviceToken === undefined ? Answer.deny(false) : Answer.allow({ deviceToken });
  }

  /**
   * `RecordFlowAttempt`: counts one attempt at `flow` for the account **before** the
   * gateway acts on it (checks the code, sends the mail); act only on an allow. The
   * same outcomes as `recordAttempt`: only DECISION_ALLOW allows; every status,
   * DECISION_UNSPECIFIED and unknown value denies; transport failures are retried with
   * the same `attemptId` (generated when absent). `clientKey` is required for the mail
   * flows (empty: the daemon answers INVALID_ARGUMENT, a deny); the code flows ignore it.
   * A deny carries no time (it would tell accounts with mail from those without).
   */
  async recordFlowAttempt(
    realm: string,
    identifier: string,
    flow: Flow,
    options: CallOptions & { clientKey?: string; attemptId?: string } = {},
  ): Promise<Answer> {
    const code = wireValue(FLOWS, flow);
    if (code === undefined) {
      return Answer.deny(false);
    }
    const request = {
      account: { realm, identifier },
      flow: code,
      client_key: options.clientKey ?? '',
      attempt_id: options.attemptId ?? randomUUID(),
    };
    const r = await this.call('RecordFlowAttempt', routeKey(realm, identifier), request, options);
    return r.kind === 'ok' ? decisionAnswer(r.value) : failureAnswer(r);
  }

  /** `recordFlowAttempt(…, 'second_factor')`: before checking a one-time code; on a right code, `clearFlow`. */
  secondFactorAttempt(realm: string, identifier: string, options: CallOptions & { attemptId?: string } = {}): Promise<Answer> {
    return this.recordFlowAttempt(realm, identifier, 'second_factor', codeFlowOptions(options));
  }

  /** `recordFlowAttempt(…, 'recovery_code')`: before checking a recovery code; on a right code, `clearFlow`. */
  recoveryCodeAttempt(realm: string, identifier: string, options: CallOptions & { attemptId?: string } = {}): Promise<Answer> {
    return this.recordFlowAttempt(realm, identifier, 'recovery_code', codeFlowOptions(options));
  }

  /**
   * `recordFlowAttempt(…, 'password_reset')`: before sending a reset mail. Send one
   * only on an allow *and* when the account exists; answer the user with the same page
   * either way (docs/flows.md).
   */
  passwordResetRequest(
    realm: string,
    identifier: string,
    clientKey: string,
    options: CallOptions & { attemptId?: string } = {},
  ): Promise<Answer> {
    return this.recordFlowAttempt(realm, identifier, 'password_reset', { ...codeFlowOptions(options), clientKey });
  }

  /** `recordFlowAttempt(…, 'verification_resend')`: before resending an address-verification mail; send it only on an allow. */
  verificationResendRequest(
    realm: string,
    identifier: string,
    clientKey: string,
    options: CallOptions & { attemptId?: string } = {},
  ): Promise<Answer> {
    return this.recordFlowAttempt(realm, identifier, 'verification_resend', { ...codeFlowOptions(options), clientKey });
  }

  /**
   * `ClearFlow`: a code of `flow` was verified; its record is cleared. An allow when the
   * daemon cleared it. Clears nothing of the login throttle (`clearAttempts` does that).
   * A mail flow is refused by the daemon (INVALID_ARGUMENT, a deny).
   */
  async clearFlow(realm: string, identifier: string, flow: CodeFlow, options: CallOptions = {}): Promise<Answer> {
    const code = wireValue(FLOWS, flow);
    if (code === undefined) {
      return Answer.deny(false);
    }
    const r = await this.call('ClearFlow', routeKey(realm, identifier), { account: { realm, identifier }, flow: code }, options);
    return r.kind === 'ok' ? Answer.allow() : failureAnswer(r);
  }

  /** `ClearAttempts`: an allow when the daemon cleared the record. */
  async clearAttempts(
    realm: string,
    identifier: string,
    reason: ClearReason,
    options: CallOptions & { clientKey?: string } = {},
  ): Promise<Answer> {
    const code = wireValue(CLEAR_REASONS, reason);
    if (code === undefined) {
      return Answer.deny(false);
    }
    const request = { account: { realm, identifier }, reason: code, client_key: options.clientKey ?? '' };
    const r = await this.call('ClearAttempts', routeKey(realm, identifier), request, options);
    return r.kind === 'ok' ? Answer.allow() : failureAnswer(r);
  }

  /**
   * `CheckPassword`, at set and change time (docs/breach.md). Only `'acceptable'`
   * accepts the new password; `'unchecked'` (no filter configured, the daemon
   * unreachable, an unknown reason) refuses it too.
   */
  async checkPassword(realm: string, identifier: string, password: string | Uint8Array, options: CallOptions = {}): Promise<PasswordCheck> {
    const bytes = typeof password === 'string' ? Buffer.from(password, 'utf8') : Buffer.from(password);
    let r: Outcome;
    try {
      r = await this.call('CheckPassword', routeKey(realm, identifier), { account: { realm, identifier }, password: bytes }, options);
    } finally {
      bytes.fill(0);
    }
    if (r.kind !== 'ok') {
      return { kind: 'unchecked', retryable: failureRetryable(r) };
    }
    switch (r.value['reason']) {
      case 1:
        return { kind: 'acceptable' };
      case 2:
        return { kind: 'breached' };
      case 3:
        return { kind: 'context_word' };
      default:
        return { kind: 'unchecked', retryable: false };
    }
  }

  /** The endpoint a `verify` for `clientKey` would go to now; `undefined` when the breaker is open. */
  route(clientKey: string): string | undefined {
    return this.pool.route(clientKey);
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

  /** Closes every channel. Calls after this are denied (retryable). */
  close(): void {
    this.closed = true;
    for (const e of this.endpoints) e.client.close();
    for (const c of this.retired) c.close();
    this.retired.clear();
  }

  private channel(target: string): grpc.Client {
    return new grpc.Client(target, this.credentials ?? grpc.credentials.createInsecure(), this.channelOptions);
  }

  private emit(event: ClientEvent): void {
    if (this.onEvent === undefined) return;
    try {
      this.onEvent(event);
    } catch {
      // A hook's failure changes no answer.
    }
  }

  /**
   * One logical call of `name`: endpoints in rendezvous order for `route`, retrying
   * transport failures only, within the budget and the call deadline. Never throws.
   */
  private async call(name: GovernorMethod, route: string, request: object, trace: TraceContext): Promise<Outcome> {
    this.calls += 1;
    this.budget.deposit();
    if (this.closed) {
      return { kind: 'transport' };
    }
    const m = this.methods[name];
    let payload: Buffer;
    let headers: Array<[string, string]>;
    try {
      // Serialized once: every try sends the same bytes, the same attempt_id.
      payload = m.requestSerialize(request);
      headers = traceHeaders(trace);
    } catch {
      // Input the wire cannot carry is the gateway's bug: a deny, not retryable. The
      // error is not passed on: it could quote a field.
      return { kind: 'answered', code: grpc.status.INVALID_ARGUMENT };
    }
    if (this.bearer !== undefined) {
      headers.push(['authorization', this.bearer]);
    }
    try {
      const deadline = monotonicMs() + this.callTimeoutMs;
      const tried: number[] = [];
      for (;;) {
        const pick = this.pool.pick(route, tried);
        if (pick === undefined) {
          if (tried.length === 0) {
            this.breakerDenials += 1;
            this.emit({ type: 'breaker_denial', method: name });
            return { kind: 'breaker_open' };
          }
          return { kind: 'transport' };
        }
        tried.push(pick);
        const outcome = await this.tryOnce(pick, m, payload, deadline, headers);
        if (outcome.kind === 'ok' || outcome.kind === 'answered') {
          this.pool.answered(pick);
          return outcome;
        }
        this.transportFailures += 1;
        this.pool.failed(pick);
        this.emit({ type: 'transport_failure', method: name, endpoint: this.endpoints[pick].url, timeout: outcome.kind === 'timeout' });
        const retry =
          outcome.kind === 'transport' && tried.length <= this.maxRetries && monotonicMs() < deadline && this.budget.withdraw();
        if (!retry) {
          return outcome;
        }
        this.retries += 1;
        this.emit({ type: 'retry', method: name, retries: tried.length });
      }
    } finally {
      // The serialized request holds the password on Verify and CheckPassword.
      payload.fill(0);
    }
  }

  /**
   * One try on endpoint `index`, cut off at `deadline` (monotonic ms). A status counts
   * as the daemon's answer only when it came from the daemon: with response headers,
   * or in a trailers-only response (whose headers grpc-js hands back as the status's
   * metadata: at least `content-type`). A status grpc-js made up from a refused,
   * reset or garbled connection has neither, and is a transport failure, whatever its
   * code (grpc-js reports those as UNAVAILABLE, INTERNAL, CANCELLED ...).
   */
  private tryOnce(index: number, m: Method, payload: Buffer, deadline: number, headers: Array<[string, string]>): Promise<Outcome> {
    const endpoint = this.endpoints[index];
    const client = endpoint.client;
    return new Promise<Outcome>((resolve) => {
      const left = deadline - monotonicMs();
      if (left <= 0) {
        resolve({ kind: 'timeout' });
        return;
      }
      let settled = false;
      let deadlineTimer: NodeJS.Timeout | undefined;
      let connectTimer: NodeJS.Timeout | undefined;
      let call: grpc.ClientUnaryCall | undefined;
      const finish = (outcome: Outcome): void => {
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
        call = client.makeUnaryRequest<Buffer, Record<string, unknown>>(
          m.path,
          toBuffer,
          m.responseDeserialize,
          payload,
          metadata,
          { deadline: new Date(Date.now() + left) },
          (err, value) => {
            if (err === null || err === undefined) {
              if (value !== undefined) {
                finish({ kind: 'ok', value });
              } else {
                finish({ kind: 'answered', code: grpc.status.INTERNAL });
              }
            } else if (sawHeaders || Object.keys(err.metadata?.getMap() ?? {}).length > 0) {
              finish({ kind: 'answered', code: err.code });
            } else if (err.code === grpc.status.DEADLINE_EXCEEDED || monotonicMs() >= deadline) {
              finish({ kind: 'timeout' });
            } else {
              finish({ kind: 'transport' });
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
          Math.min(this.connectTimeoutMs, left),
        );
      }
    });
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
    }, this.callTimeoutMs + 1000).unref();
  }
}

/** DECISION_ALLOW is the only allow; DENY, UNSPECIFIED and unknown values deny. */
function decisionAnswer(value: Record<string, unknown>): Answer {
  return value['decision'] === DECISION_ALLOW ? Answer.allow() : Answer.deny(false);
}

/** A non-empty string, or `undefined`. */
function nonEmpty(value: unknown): string | undefined {
  return typeof value === 'string' && value !== '' ? value : undefined;
}

/** The options a flow call passes on: trace context and the attempt id, nothing else. */
function codeFlowOptions(options: CallOptions & { attemptId?: string }): CallOptions & { attemptId?: string } {
  return { traceparent: options.traceparent, tracestate: options.tracestate, attemptId: options.attemptId };
}

/** Non-Verify calls are spread over endpoints by account, as the Rust client does. */
function routeKey(realm: string, identifier: string): string {
  return `${Buffer.byteLength(realm, 'utf8')}\0${realm}\0${identifier}`;
}
