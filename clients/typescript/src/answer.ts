// What a call answers: a two-valued decision, the kind of answer it was (a verify's
// deny may be a challenge or a required password change) and the signals that ride on
// it. Every failure is a deny (docs/client.md, "Every outcome").

import { inspect } from 'node:util';
import { status } from '@grpc/grpc-js';

/** The only two decisions there are. Every failure is `'deny'`. */
export type Decision = 'allow' | 'deny';

/**
 * What the answer was, one value each: `'allow'` exactly when the decision is
 * `'allow'`; the others are denies. A `verify` whose password was right may be a
 * `'challenge'` (VERDICT_CHALLENGE: ask for a second factor, then `confirmDevice` with
 * `challengeToken`) or a `'change_required'` (VERDICT_CHANGE_REQUIRED: no session
 * before a password change). Neither is a login: their decision is `'deny'`.
 */
export type AnswerKind = 'allow' | 'deny' | 'challenge' | 'change_required';

/** Why a `'challenge'`: `'new_device'` (CHALLENGE_REASON_NEW_DEVICE), or a reason this client does not know. */
export type ChallengeReason = 'new_device' | 'unknown';

/** gRPC status codes a daemon may send that mean "the same login may succeed later". */
const RETRYABLE_CODES: ReadonlySet<number> = new Set([
  // The CPU budget is full (the attempt was refunded).
  status.RESOURCE_EXHAUSTED,
  // The daemon could not reach its store.
  status.UNAVAILABLE,
]);

/** The signals an answer may carry besides its decision. */
export interface Signals {
  needsRehash?: boolean;
  deviceToken?: string;
  spraySuspected?: boolean;
  stepUp?: boolean;
  networkThrottled?: boolean;
  passwordBreached?: boolean;
  lockoutStarted?: boolean;
  ceilingReached?: boolean;
}

/**
 * What a call answered. `decision` is the only field that decides a login; the others
 * are advice (docs/client.md).
 *
 * The device token is a credential for the device's bucket: it is left out of
 * `util.inspect` and `JSON.stringify`, so logging an answer never prints it.
 */
export class Answer {
  /** `'allow'` or `'deny'`; the only field that decides a login. */
  readonly decision: Decision;
  /**
   * `'allow'` (the only kind whose decision is `'allow'`), `'deny'`, or on a `verify`
   * whose password was right `'challenge'` or `'change_required'`: denies that the
   * gateway answers with a second factor or a password change instead of its failure
   * page.
   */
  readonly kind: AnswerKind;
  /**
   * On a deny only: the daemon refused for capacity, could not be reached or could
   * not reach its store, so the same login may succeed later (answer 503 with
   * `Retry-After`). `false` for a reject, a closed door and bad input.
   */
  readonly retryable: boolean;
  /** On an allowed `verify` only: store a new hash at the realm's target. */
  readonly needsRehash: boolean;
  /** On an allowed `verify` only: the fresh device token (docs/devices.md). */
  readonly deviceToken: string | undefined;
  /** On a `verify` the daemon answered: the password is being sprayed (docs/spray.md). */
  readonly spraySuspected: boolean;
  /** On a `verify` or `recordAttempt` the daemon answered: challenge before the next attempt. */
  readonly stepUp: boolean;
  /** On a `verify` or `recordAttempt` the daemon answered: the client's network is throttled. */
  readonly networkThrottled: boolean;
  /**
   * On an allowed `verify`: the password is breached; force a change (docs/breach.md).
   * Also on a `'challenge'` (ask for the change once the challenge passed) and a
   * `'change_required'`.
   */
  readonly passwordBreached: boolean;
  /**
   * On a `'challenge'` only: what `confirmDevice` takes once the second factor passed
   * (within 15 minutes, with the same stored hash). Keep it in the gateway's
   * server-side session, never in a URL. Never printed, as the device token.
   */
  readonly challengeToken: string | undefined;
  /** On a `'challenge'` only: why. */
  readonly challengeReason: ChallengeReason | undefined;
  /**
   * On a deny of `verify`, `recordAttempt` or a code flow's `recordFlowAttempt`: this
   * very attempt started a lockout (the first its record refused in the window). For
   * the gateway only, which may tell the account's owner; show the end user the same
   * page as for any deny. Set once per lockout, never on a retry of the same attempt
   * id (docs/gateways.md, "When an attempt shuts the door").
   */
  readonly lockoutStarted: boolean;
  /**
   * This attempt brought its record to the consecutive-failure ceiling (docs/throttle.md,
   * "The ceiling"): the door stays shut until a success, a completed reset or an
   * operator's unlock (after an allowed `recordAttempt`: if the password turns out
   * wrong). For the gateway only.
   */
  readonly ceilingReached: boolean;
  /**
   * On a deny that is no verdict of the daemon's only: how the call failed (a status
   * the daemon sent, bad input the client refused to send, a transport failure, a
   * timeout, the open breaker). Advice for logs and for the gateway's own handling
   * (an INVALID_ARGUMENT naming `stored_hash`: the daemon cannot use the stored hash);
   * it never holds a request field's value. `undefined` on every answer the daemon
   * gave as a message.
   */
  readonly failure: Failure | undefined;

  private constructor(
    kind: AnswerKind,
    retryable: boolean,
    signals: Signals,
    challenge?: { token: string; reason: ChallengeReason },
    failure?: Failure,
  ) {
    this.decision = kind === 'allow' ? 'allow' : 'deny';
    this.kind = kind;
    this.retryable = this.decision === 'deny' && retryable;
    this.needsRehash = signals.needsRehash === true;
    this.spraySuspected = signals.spraySuspected === true;
    this.stepUp = signals.stepUp === true;
    this.networkThrottled = signals.networkThrottled === true;
    this.passwordBreached = signals.passwordBreached === true;
    this.lockoutStarted = signals.lockoutStarted === true;
    this.ceilingReached = signals.ceilingReached === true;
    // Not enumerable: never in a log line made from the answer.
    this.deviceToken = undefined;
    Object.defineProperty(this, 'deviceToken', {
      value: signals.deviceToken ? signals.deviceToken : undefined,
      enumerable: false,
      writable: false,
    });
    this.challengeReason = challenge?.reason;
    this.challengeToken = undefined;
    Object.defineProperty(this, 'challengeToken', {
      value: challenge?.token,
      enumerable: false,
      writable: false,
    });
    this.failure = failure === undefined ? undefined : Object.freeze({ ...failure });
    Object.freeze(this);
  }

  /** An explicit allow from the daemon. */
  static allow(signals: Signals = {}): Answer {
    return new Answer('allow', false, signals);
  }

  /** A deny; `retryable` says whether the same login may succeed later. */
  static deny(retryable: boolean, signals: Signals = {}): Answer {
    return new Answer('deny', retryable, { ...signals, deviceToken: undefined, needsRehash: false, passwordBreached: false });
  }

  /** The deny of a failed call: retryable as `failure` says, and carrying it as `failure`. */
  static failed(failure: Failure): Answer {
    return new Answer('deny', failureRetryable(failure), {}, undefined, failure);
  }

  /**
   * A `verify` whose password was right from a device the realm does not know: a deny
   * that carries the challenge token (non-empty) and no device token.
   */
  static challenge(token: string, reason: ChallengeReason, signals: Signals = {}): Answer {
    if (typeof token !== 'string' || token === '') {
      // A challenge without a token could never be confirmed: a plain deny.
      return Answer.deny(false, signals);
    }
    return new Answer('challenge', false, { ...signals, deviceToken: undefined, needsRehash: false }, { token, reason });
  }

  /** A `verify` whose right password must be changed before any session: a deny without a device token. */
  static changeRequired(signals: Signals = {}): Answer {
    return new Answer('change_required', false, { ...signals, deviceToken: undefined, needsRehash: false });
  }

  /** `decision === 'allow'`. */
  isAllowed(): boolean {
    return this.decision === 'allow';
  }

  toJSON(): Record<string, unknown> {
    return {
      decision: this.decision,
      kind: this.kind,
      retryable: this.retryable,
      needsRehash: this.needsRehash,
      deviceToken: this.deviceToken === undefined ? undefined : '<redacted>',
      spraySuspected: this.spraySuspected,
      stepUp: this.stepUp,
      networkThrottled: this.networkThrottled,
      passwordBreached: this.passwordBreached,
      challengeToken: this.challengeToken === undefined ? undefined : '<redacted>',
      challengeReason: this.challengeReason,
      lockoutStarted: this.lockoutStarted,
      ceilingReached: this.ceilingReached,
      failure: this.failure,
    };
  }

  [inspect.custom](): string {
    return `Answer ${inspect(this.toJSON())}`;
  }
}

/** What `checkPassword` found for a new password. Only `'acceptable'` accepts it. */
export type PasswordCheck =
  | { readonly kind: 'acceptable' }
  | { readonly kind: 'breached' }
  | { readonly kind: 'context_word' }
  /**
   * The check was not made (no filter, the daemon unreachable, any failure): refuse.
   * `message` as on a transport `Failure` (`'TLS handshake refused: …'`).
   */
  | { readonly kind: 'unchecked'; readonly retryable: boolean; readonly message?: string };

/** How one logical call ended, when it did not return a value. */
export type Failure =
  /**
   * The daemon answered with this gRPC status (`@grpc/grpc-js`'s `status`). Never
   * retried, never a health failure. On an INVALID_ARGUMENT, `field` is the request
   * field the daemon's message names first (`'stored_hash'`, `'password'`,
   * `'client_key'`, `'account.realm'`, `'attempt_id'`, …); the message itself is not
   * kept.
   */
  | { readonly kind: 'answered'; readonly code: number; readonly field?: string }
  /**
   * The client refused to send the call: `field` (`'password'`, `'identifier'`,
   * `'stored_hash'`, …) cannot be sent as given (a string that is not well-formed
   * UTF-16, which UTF-8 cannot carry), or, `field` undefined, the request could not
   * be encoded. Not retryable. No network call was made.
   */
  | { readonly kind: 'bad_input'; readonly field: string | undefined }
  /**
   * Connection refused, reset, unreachable, connect timeout, not HTTP/2, a TLS handshake
   * that failed: retried. `message`, when the client can tell why a TLS connection
   * failed, says so: `'TLS handshake refused: '` and the reason, such as `'the daemon
   * refused this client certificate: it has expired or is not yet valid
   * (certificate_expired)'` or `"the daemon's certificate is not signed by a CA in
   * tls.caFile (…)"`. Advice for logs only: it changes nothing of the answer, and never
   * holds a key, a token or a request field.
   */
  | { readonly kind: 'transport'; readonly message?: string }
  /** No answer within the call deadline: not retried (the daemon may be working). */
  | { readonly kind: 'timeout' }
  /** No endpoint could take the call: no network call at all. */
  | { readonly kind: 'breaker_open' };

/** Every failure is a deny; some are worth trying again later. */
export function failureAnswer(failure: Failure): Answer {
  return Answer.failed(failure);
}

export function failureRetryable(failure: Failure): boolean {
  switch (failure.kind) {
    case 'answered':
      return RETRYABLE_CODES.has(failure.code);
    case 'bad_input':
      return false;
    case 'transport':
    case 'timeout':
    case 'breaker_open':
      return true;
  }
}
