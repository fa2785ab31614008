// @portcullis/client/express: login and password-reset middleware for Express 4 and 5
// (README.md, "Express"). express is a peer dependency: nothing here loads it; the
// middleware uses the request and response the app's Express hands it.
//
//   const gate = portcullisExpress({ client, realm: 'default', lookupUser, deviceCookie: { secret } });
//   app.post('/login', express.urlencoded({ extended: false }), gate.login, (req, res) => {
//     const outcome = loginOutcome(res); // allow | second_factor | deny | challenge | change_required
//   });
//   app.post('/password/reset', express.urlencoded({ extended: false }), gate.passwordReset, (req, res) => {
//     const outcome = resetOutcome(res); // sendMail, retryable
//   });

import type { RequestHandler, Response } from 'express';

import { deviceCookieName, writeDeviceCookie } from './cookies';
import { loginMiddleware } from './login';
import { PortcullisExpressOptions, resolve } from './options';
import { resetMiddleware } from './reset';

export {
  LoginAllow,
  LoginChallenge,
  LoginChangeRequired,
  LoginDeny,
  LoginOutcome,
  LoginSecondFactor,
  loginOutcome,
  outcomeOf,
} from './login';
export { DeviceCookieOptions, PortcullisExpressError, PortcullisExpressEvent, PortcullisExpressOptions } from './options';
export { ResetNoMail, ResetOutcome, ResetSend, resetOutcome } from './reset';

declare global {
  // Express's own way to type `res.locals` (its Locals interface is global).
  // eslint-disable-next-line @typescript-eslint/no-namespace
  namespace Express {
    interface Locals {
      /** Set by `portcullisExpress(...).login`; read it with `loginOutcome(res)`. */
      portcullisLogin?: import('./login').LoginOutcome;
      /** Set by `portcullisExpress(...).passwordReset`; read it with `resetOutcome(res)`. */
      portcullisReset?: import('./reset').ResetOutcome;
    }
  }
}

/** The middleware of one realm, and the device cookie helpers a code step needs. */
export interface PortcullisExpress {
  /**
   * For `POST /login` (after a body parser): asks the daemon's Verify and sets
   * `res.locals.portcullisLogin`; on an `'allow'` it also sets the device cookie.
   */
  readonly login: RequestHandler;
  /**
   * For `POST /password/reset` (after a body parser): counts the request with
   * RecordFlowAttempt(FLOW_PASSWORD_RESET) and sets `res.locals.portcullisReset`.
   */
  readonly passwordReset: RequestHandler;
  /**
   * Sets the account's device cookie (HttpOnly, Secure, SameSite=Lax) to `token`:
   * after `confirmDevice` in a code step, or after the second factor a
   * `'second_factor'` asked for.
   */
  setDeviceCookie(res: Response, identifier: string, token: string): void;
  /** The device cookie's name for `identifier` (the configured name and an HMAC under `deviceCookie.secret`). */
  deviceCookieName(identifier: string): string;
}

/**
 * The login and reset middleware of one realm.
 * @throws PortcullisExpressError naming a setting it cannot use.
 */
export function portcullisExpress(options: PortcullisExpressOptions): PortcullisExpress {
  const o = resolve(options);
  return Object.freeze({
    login: loginMiddleware(o),
    passwordReset: resetMiddleware(o),
    setDeviceCookie: (res: Response, identifier: string, token: string) => writeDeviceCookie(o, res, identifier, token),
    deviceCookieName: (identifier: string) => deviceCookieName(o, identifier),
  });
}
