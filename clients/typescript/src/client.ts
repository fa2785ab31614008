// The gateway's handle to the daemon fleet: the same client as the Rust one
// (client/src/lib.rs), on @grpc/grpc-js. This file maps each call's inputs to its
// request and the daemon's answer to an `Answer`; caller.ts makes the calls,
// config.ts checks the settings, wire.ts holds the generated wire types.
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
// Nothing here logs. The optional `onEvent` hook gets method and endpoint names and
// counts (and, for a refused TLS handshake, why: tls.ts), never a request field: no
// password, hash, identifier or token can reach a log through it, and no error message
// here holds any of them.

import { randomUUID } from 'node:crypto';

import { Answer, PasswordCheck, failureAnswer, failureRetryable } from './answer';
import { Caller, ClientStats, Outcome } from './caller';
import { ClientConfig, resolveConfig } from './config';
import { ChallengeReason, Decision, PasswordCheckReason, Verdict, VerifyResponse } from './gen/portcullis/v1/governor_pb';
import {
  CallOptions,
  ClearReason,
  CodeFlow,
  DeviceConfirmation,
  Flow,
  Login,
  account,
  routeKey,
  wireClearReason,
  wireFlow,
} from './requests';
import { governorMethod } from './wire';

const METHODS = {
  admit: governorMethod('admit'),
  recordAttempt: governorMethod('recordAttempt'),
  verify: governorMethod('verify'),
  clearAttempts: governorMethod('clearAttempts'),
  checkPassword: governorMethod('checkPassword'),
  recordFlowAttempt: governorMethod('recordFlowAttempt'),
  clearFlow: governorMethod('clearFlow'),
  confirmDevice: governorMethod('confirmDevice'),
};

/** Options of the calls that count an attempt. */
export type CountingOptions = CallOptions & { clientKey?: string; attemptId?: string };

/** The gateway's handle to the daemon fleet. Connects lazily; call `close()` when done. */
export class Client {
  private readonly caller: Caller;

  /** @throws ClientConfigError for an empty or invalid endpoint list, an out-of-range setting, an unreadable file. */
  constructor(config: ClientConfig = {}) {
    this.caller = new Caller(resolveConfig(config));
  }

  /** `Admit`: is the account key's door open? Never counts. */
  async admit(realm: string, identifier: string, options: CallOptions = {}): Promise<Answer> {
    const r = await this.caller.call(METHODS.admit, routeKey(realm, identifier), { account: account(realm, identifier) }, options);
    return r.kind === 'ok' ? decisionAnswer(r.value.decision) : failureAnswer(r);
  }

  /**
   * `RecordAttempt`: counts one attempt before the gateway compares the hash itself.
   * `attemptId` makes retries idempotent; one is generated when absent. With a
   * `clientKey`, the attempt also takes a token of the client network's bucket.
   */
  async recordAttempt(realm: string, identifier: string, options: CountingOptions = {}): Promise<Answer> {
    const request = {
      account: account(realm, identifier),
      attemptId: options.attemptId ?? randomUUID(),
      clientKey: options.clientKey ?? '',
    };
    const r = await this.caller.call(METHODS.recordAttempt, routeKey(realm, identifier), request, options);
    if (r.kind !== 'ok') {
      return failureAnswer(r);
    }
    const signals = {
      stepUp: r.value.stepUp,
      networkThrottled: r.value.networkThrottled,
      lockoutStarted: r.value.lockoutStarted,
      ceilingReached: r.value.ceilingReached,
    };
    return r.value.decision === Decision.ALLOW ? Answer.allow(signals) : Answer.deny(false, signals);
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
    if (typeof login.password === 'string' && !login.password.isWellFormed()) {
      return failureAnswer(this.caller.badInput('Verify', 'password'));
    }
    const password = typeof login.password === 'string' ? Buffer.from(login.password, 'utf8') : Buffer.from(login.password);
    const request = {
      account: account(login.realm, login.identifier),
      password,
      storedHash: login.storedHash,
      clientKey: login.clientKey,
      attemptId: login.attemptId ?? randomUUID(),
      deviceToken: login.deviceToken ?? '',
    };
    let r: Outcome<VerifyResponse>;
    try {
      r = await this.caller.call(METHODS.verify, login.clientKey, request, login);
    } finally {
      // Our copy of the password is wiped (the caller owns `login.password`).
      password.fill(0);
    }
    return r.kind === 'ok' ? verdictAnswer(r.value) : failureAnswer(r);
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
      account: account(confirm.realm, confirm.identifier),
      challengeToken: confirm.challengeToken,
      storedHash: confirm.storedHash,
    };
    const r = await this.caller.call(METHODS.confirmDevice, routeKey(confirm.realm, confirm.identifier), request, confirm);
    if (r.kind !== 'ok') {
      return failureAnswer(r);
    }
    const deviceToken = nonEmpty(r.value.deviceToken);
    return deviceToken === undefined ? Answer.deny(false) : Answer.allow({ deviceToken });
  }

  /**
   * `RecordFlowAttempt`: counts one attempt at `flow` for the account **before** the
   * gateway acts on it (checks the code, sends the mail); act only on an allow. The
   * same outcomes as `recordAttempt`: only DECISION_ALLOW allows; every status,
   * DECISION_UNSPECIFIED and unknown value denies; transport failures are retried with
   * the same `attemptId` (generated when absent). `clientKey` is required for the mail
   * flows (empty: the daemon answers INVALID_ARGUMENT, a deny); the code flows ignore it.
   * A deny carries no time (it would tell accounts with mail from those without). A
   * `flow` this client does not know is a deny without a call.
   */
  async recordFlowAttempt(realm: string, identifier: string, flow: Flow, options: CountingOptions = {}): Promise<Answer> {
    const wire = wireFlow(flow);
    if (wire === undefined) {
      return Answer.deny(false);
    }
    const request = {
      account: account(realm, identifier),
      flow: wire,
      clientKey: options.clientKey ?? '',
      attemptId: options.attemptId ?? randomUUID(),
    };
    const r = await this.caller.call(METHODS.recordFlowAttempt, routeKey(realm, identifier), request, options);
    if (r.kind !== 'ok') {
      return failureAnswer(r);
    }
    const signals = { lockoutStarted: r.value.lockoutStarted, ceilingReached: r.value.ceilingReached };
    return r.value.decision === Decision.ALLOW ? Answer.allow(signals) : Answer.deny(false, signals);
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
   * A mail flow is refused by the daemon (INVALID_ARGUMENT, a deny); a `flow` this
   * client does not know is a deny without a call.
   */
  async clearFlow(realm: string, identifier: string, flow: CodeFlow, options: CallOptions = {}): Promise<Answer> {
    const wire = wireFlow(flow);
    if (wire === undefined) {
      return Answer.deny(false);
    }
    const request = { account: account(realm, identifier), flow: wire };
    const r = await this.caller.call(METHODS.clearFlow, routeKey(realm, identifier), request, options);
    return r.kind === 'ok' ? Answer.allow() : failureAnswer(r);
  }

  /** `ClearAttempts`: an allow when the daemon cleared the record; a `reason` this client does not know is a deny without a call. */
  async clearAttempts(
    realm: string,
    identifier: string,
    reason: ClearReason,
    options: CallOptions & { clientKey?: string } = {},
  ): Promise<Answer> {
    const wire = wireClearReason(reason);
    if (wire === undefined) {
      return Answer.deny(false);
    }
    const request = { account: account(realm, identifier), reason: wire, clientKey: options.clientKey ?? '' };
    const r = await this.caller.call(METHODS.clearAttempts, routeKey(realm, identifier), request, options);
    return r.kind === 'ok' ? Answer.allow() : failureAnswer(r);
  }

  /**
   * `CheckPassword`, at set and change time (docs/breach.md). Only `'acceptable'`
   * accepts the new password; `'unchecked'` (no filter configured, the daemon
   * unreachable, an unknown reason) refuses it too.
   */
  async checkPassword(realm: string, identifier: string, password: string | Uint8Array, options: CallOptions = {}): Promise<PasswordCheck> {
    if (typeof password === 'string' && !password.isWellFormed()) {
      this.caller.badInput('CheckPassword', 'password');
      return { kind: 'unchecked', retryable: false };
    }
    const bytes = typeof password === 'string' ? Buffer.from(password, 'utf8') : Buffer.from(password);
    let r;
    try {
      r = await this.caller.call(
        METHODS.checkPassword,
        routeKey(realm, identifier),
        { account: account(realm, identifier), password: bytes },
        options,
      );
    } finally {
      bytes.fill(0);
    }
    if (r.kind !== 'ok') {
      const message = r.kind === 'transport' ? r.message : undefined;
      return { kind: 'unchecked', retryable: failureRetryable(r), ...(message === undefined ? {} : { message }) };
    }
    switch (r.value.reason) {
      case PasswordCheckReason.OK:
        return { kind: 'acceptable' };
      case PasswordCheckReason.BREACHED:
        return { kind: 'breached' };
      case PasswordCheckReason.CONTEXT_WORD:
        return { kind: 'context_word' };
      default:
        // UNSPECIFIED and every reason this client does not know.
        return { kind: 'unchecked', retryable: false };
    }
  }

  /** The endpoint a `verify` for `clientKey` would go to now; `undefined` when the breaker is open. */
  route(clientKey: string): string | undefined {
    return this.caller.route(clientKey);
  }

  /** Counters and health now. */
  stats(): ClientStats {
    return this.caller.stats();
  }

  /** Closes every channel. Calls after this are denied (retryable). */
  close(): void {
    this.caller.close();
  }
}

/** DECISION_ALLOW is the only allow; DENY, UNSPECIFIED and unknown values deny. */
function decisionAnswer(decision: Decision): Answer {
  return decision === Decision.ALLOW ? Answer.allow() : Answer.deny(false);
}

/** VERDICT_ACCEPT is the only allow; CHALLENGE and CHANGE_REQUIRED are denies of their own kind; the rest deny. */
function verdictAnswer(v: VerifyResponse): Answer {
  const common = { spraySuspected: v.spraySuspected, stepUp: v.stepUp, networkThrottled: v.networkThrottled };
  const passwordBreached = v.passwordBreached;
  switch (v.verdict) {
    case Verdict.ACCEPT:
      return Answer.allow({ ...common, needsRehash: v.needsRehash, deviceToken: nonEmpty(v.deviceToken), passwordBreached });
    case Verdict.CHALLENGE: {
      // A deny of its own kind: no device token, whatever the answer held; a
      // challenge without a token is a plain deny (Answer.challenge).
      const reason = v.challengeReason === ChallengeReason.NEW_DEVICE ? 'new_device' : 'unknown';
      return Answer.challenge(nonEmpty(v.challengeToken) ?? '', reason, {
        ...common,
        passwordBreached,
        ceilingReached: v.ceilingReached,
      });
    }
    case Verdict.CHANGE_REQUIRED:
      return Answer.changeRequired({ ...common, passwordBreached });
    default:
      // REJECT, UNSPECIFIED and every verdict this client does not know.
      return Answer.deny(false, { ...common, lockoutStarted: v.lockoutStarted, ceilingReached: v.ceilingReached });
  }
}

/** A non-empty string, or `undefined`. */
function nonEmpty(value: string): string | undefined {
  return value !== '' ? value : undefined;
}

/** The options a flow call passes on: trace context and the attempt id, nothing else. */
function codeFlowOptions(options: CallOptions & { attemptId?: string }): CallOptions & { attemptId?: string } {
  return { traceparent: options.traceparent, tracestate: options.tracestate, attemptId: options.attemptId };
}
