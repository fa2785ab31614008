// The login route's middleware: reads the form, looks the account up through the
// app's callback, asks the daemon's Verify, keeps the device cookie, and hands the
// route's handler one outcome on `res.locals.portcullisLogin`. Every failure (the
// daemon unreachable or late, an error status, an unknown answer, the lookup
// throwing, a missing field, a bug here) is a refused login: the middleware never
// calls `next(err)`, and only the daemon's explicit accept becomes an `'allow'` (or,
// when the daemon asks for more, a `'second_factor'`).

import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { status } from '@grpc/grpc-js';

import type { Answer } from '../answer';
import { deviceCookieName, readCookie, writeDeviceCookie } from './cookies';
import { PortcullisExpressError, Resolved, clientKey, emit, formField, storedHash } from './options';

/** A failure's gRPC status code, as `Failure` carries it. */
const INVALID_ARGUMENT: number = status.INVALID_ARGUMENT;

/** The daemon accepted the password and asks for nothing more: sign the user in. The device cookie is set. */
export interface LoginAllow {
  readonly kind: 'allow';
  /** The identifier as the user typed it. */
  readonly identifier: string;
  /** The password is breached: sign in, then force a password change (docs/breach.md). */
  readonly passwordBreached: boolean;
  /** Store a new hash at the realm's target (the password is in the request body). */
  readonly needsRehash: boolean;
  /** The client's answer (its device token is never printed). */
  readonly answer: Answer;
}

/**
 * The daemon accepted the password, but the password is being sprayed
 * (`answer.spraySuspected`) or the account is near its lockout (`answer.stepUp`): no
 * session until a second factor passed. The device cookie was not set; once the factor
 * passed, set it with `setDeviceCookie(res, identifier, answer.deviceToken)` and sign
 * the user in (then as an `'allow'`: `passwordBreached`, `needsRehash`).
 */
export interface LoginSecondFactor {
  readonly kind: 'second_factor';
  /** The identifier as the user typed it. */
  readonly identifier: string;
  /** The password is breached: once the factor passed, force a password change (docs/breach.md). */
  readonly passwordBreached: boolean;
  /** Store a new hash at the realm's target (the password is in the request body). */
  readonly needsRehash: boolean;
  /** The client's answer: its `deviceToken` (never printed) for the cookie once the factor passed. */
  readonly answer: Answer;
}

/** A refused login. */
export interface LoginDeny {
  readonly kind: 'deny';
  /** The daemon could not answer now (unreachable, late, its store down, the CPU budget full) or the lookup failed: 503 with `Retry-After`. Otherwise the one failure page (401). */
  readonly retryable: boolean;
  /** Show a CAPTCHA before the next attempt (the client's network is throttled, or the account is near its lockout), whatever the password. */
  readonly captcha: boolean;
  /** The client's answer, when the daemon was asked. */
  readonly answer?: Answer;
  /** What `lookupUser` threw, or a `PortcullisExpressError` naming `lookupTimeoutMs` when it did not settle in time: for the app's own log. */
  readonly error?: unknown;
}

/**
 * The code page: a right password from a device the account does not know
 * (`sendCode`: send a code, keep `challengeToken` and `storedHash` server-side for
 * `confirmDevice`), or, with `stepUp`, any other refused login (`sendCode` false: the
 * same page, no code, and no code completes it). Render one page for both.
 */
export interface LoginChallenge {
  readonly kind: 'challenge';
  /** The identifier as the user typed it. */
  readonly identifier: string;
  /** Whether this is the real challenge: only then send a code. */
  readonly sendCode: boolean;
  /** For `confirmDevice` once the code passed (only when `sendCode`; never printed). */
  readonly challengeToken: string | undefined;
  /** The stored hash the challenge is bound to, for `confirmDevice` (only when `sendCode`; never printed). */
  readonly storedHash: string | undefined;
  /** The password is breached: ask for a change once the code passed. */
  readonly passwordBreached: boolean;
}

/** A right password that is breached and out of grace logins: the password-change page, no session. */
export interface LoginChangeRequired {
  readonly kind: 'change_required';
  /** The identifier as the user typed it. */
  readonly identifier: string;
}

/**
 * What the login middleware decided: allow, deny, challenge or change required, with
 * the daemon's accept split in two: `'allow'` (sign in) and `'second_factor'` (the
 * password matched; no session before a second factor). `kind === 'allow'` alone means
 * sign in.
 */
export type LoginOutcome = LoginAllow | LoginSecondFactor | LoginDeny | LoginChallenge | LoginChangeRequired;

/** A refused login. */
function deny(retryable: boolean, extra: { captcha?: boolean; answer?: Answer; error?: unknown } = {}): LoginDeny {
  return { kind: 'deny', retryable, captcha: extra.captcha === true, answer: extra.answer, error: extra.error };
}

/** A challenge outcome; its token and hash are not enumerable, so logging the outcome prints neither. */
function challenge(
  identifier: string,
  secrets: { token: string; storedHash: string } | undefined,
  passwordBreached: boolean,
): LoginChallenge {
  const outcome = { kind: 'challenge', identifier, sendCode: secrets !== undefined, passwordBreached } as LoginChallenge;
  Object.defineProperty(outcome, 'challengeToken', { value: secrets?.token, enumerable: false });
  Object.defineProperty(outcome, 'storedHash', { value: secrets?.storedHash, enumerable: false });
  return Object.freeze(outcome);
}

/**
 * The daemon's answer as an outcome, in the example gateway's order
 * (client/examples/gateway.rs): a retryable deny first, then the network's CAPTCHA
 * whatever the verdict, the real challenge, every other deny as the code page in a
 * `stepUp` realm, the account's CAPTCHA, the change page, the allow.
 */
export function outcomeOf(o: Pick<Resolved, 'stepUp'>, identifier: string, hash: string, answer: Answer): LoginOutcome {
  if (answer.kind === 'deny' && answer.retryable) {
    return deny(true, { answer });
  }
  if (answer.networkThrottled) {
    return deny(false, { captcha: true, answer });
  }
  switch (answer.kind) {
    case 'challenge':
      if (answer.challengeToken !== undefined) {
        return challenge(identifier, { token: answer.challengeToken, storedHash: hash }, answer.passwordBreached);
      }
      return o.stepUp ? challenge(identifier, undefined, false) : deny(false, { answer });
    case 'change_required':
      return { kind: 'change_required', identifier };
    case 'allow':
      return {
        kind: answer.spraySuspected || answer.stepUp ? 'second_factor' : 'allow',
        identifier,
        passwordBreached: answer.passwordBreached,
        needsRehash: answer.needsRehash,
        answer,
      };
    default:
      return o.stepUp ? challenge(identifier, undefined, false) : deny(false, { captcha: answer.stepUp, answer });
  }
}

/** The outcome of one login request. Never throws. */
async function decide(o: Resolved, req: Request, res: Response): Promise<LoginOutcome> {
  const identifier = formField(req, o.identifierField);
  const password = formField(req, o.passwordField);
  const key = clientKey(req);
  if (identifier === undefined || identifier === '' || password === undefined || key === undefined) {
    // A form without its fields names no account: the failure page (the code page in
    // a step-up realm), with nothing asked.
    return o.stepUp ? challenge(identifier ?? '', undefined, false) : deny(false);
  }
  const looked = await storedHash(o, identifier, req);
  if ('error' in looked) {
    return deny(true, { error: looked.error });
  }
  const verify = (hash: string): Promise<Answer> =>
    o.client.verify({
      realm: o.realm,
      identifier,
      password,
      storedHash: hash,
      clientKey: key,
      deviceToken: readCookie(req, deviceCookieName(o, identifier)),
      traceparent: headerValue(req, 'traceparent'),
      tracestate: headerValue(req, 'tracestate'),
    });
  let hash = looked.hash;
  let answer = await verify(hash);
  if (hash !== '' && refusedHash(answer)) {
    // The daemon refused the hash before counting or hashing anything: answered as it
    // is, that account would answer faster than an unknown one, and never reach the
    // CAPTCHA or the lockout. Asked again as an unknown account (the same hash work,
    // counted, the same reject), it is one. Its user cannot sign in until a reset.
    emit(o, { type: 'unusable_stored_hash', realm: o.realm, error: unusableHash() });
    hash = '';
    answer = await verify(hash);
  }
  const outcome = outcomeOf(o, identifier, hash, answer);
  if (outcome.kind === 'allow' && answer.deviceToken !== undefined) {
    writeDeviceCookie(o, res, identifier, answer.deviceToken);
  }
  return outcome;
}

/** The error of an `'unusable_stored_hash'` event: the remedy, never the account or the hash. */
function unusableHash(): PortcullisExpressError {
  return new PortcullisExpressError(
    'lookupUser',
    'gave a stored hash the daemon cannot use (a format it does not verify, or above its cost ceiling): ' +
      'the login was answered as for an unknown account, and that user cannot sign in until a password reset',
  );
}

/**
 * A deny because the daemon cannot use the stored hash: INVALID_ARGUMENT naming
 * `stored_hash` (an unsupported format, a cost above its ceilings, too long), or a hash
 * the client would not send. Nothing was counted.
 */
function refusedHash(answer: Answer): boolean {
  const f = answer.failure;
  if (answer.kind !== 'deny' || answer.retryable || f === undefined) return false;
  return (
    (f.kind === 'answered' && f.code === INVALID_ARGUMENT && f.field === 'stored_hash') ||
    (f.kind === 'bad_input' && f.field === 'stored_hash')
  );
}

/** A request header's single value, if it has one. */
function headerValue(req: Request, name: string): string | undefined {
  const v = req.headers?.[name];
  return typeof v === 'string' ? v : undefined;
}

/** The login middleware for `o`: sets `res.locals.portcullisLogin`, then `next()`; never `next(err)`. */
export function loginMiddleware(o: Resolved): RequestHandler {
  return (req: Request, res: Response, next: NextFunction): void => {
    // The answer may carry a credential (the device cookie): no cache keeps it.
    res.set('Cache-Control', 'no-store');
    void decide(o, req, res)
      .catch((error: unknown): LoginOutcome => deny(true, { error }))
      .then((outcome) => {
        res.locals.portcullisLogin = outcome;
        next();
      });
  };
}

/**
 * The login outcome the middleware left for this response; a retryable deny when it
 * did not run (a route without the middleware refuses every login).
 */
export function loginOutcome(res: Response): LoginOutcome {
  const outcome: unknown = res.locals?.portcullisLogin;
  return isLoginOutcome(outcome) ? outcome : deny(true);
}

function isLoginOutcome(value: unknown): value is LoginOutcome {
  if (typeof value !== 'object' || value === null) return false;
  const kind = (value as { kind?: unknown }).kind;
  return kind === 'allow' || kind === 'second_factor' || kind === 'deny' || kind === 'challenge' || kind === 'change_required';
}
