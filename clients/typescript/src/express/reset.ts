// The "forgot password" route's middleware (docs/flows.md, `password_reset`): every
// name the user types is counted with RecordFlowAttempt(FLOW_PASSWORD_RESET) first,
// known or not; a mail goes out only on the daemon's allow *and* for an account that
// exists; the handler answers every request with one page, so the page tells no one
// which addresses have accounts. Only a retryable failure (the daemon or the lookup
// cannot answer now, for every name alike) gets a different page: 503.

import type { NextFunction, Request, RequestHandler, Response } from 'express';

import type { Answer } from '../answer';
import { Resolved, clientKey, formField, storedHash } from './options';

/**
 * What the reset middleware decided: put a mail in the outbox for `identifier` when
 * `sendMail` (the account exists and the daemon allowed the request), else nothing.
 * Answer every non-retryable outcome with the same page.
 */
export type ResetOutcome = ResetSend | ResetNoMail;

/** A reset mail to queue (never send it inline: the page would take longer for accounts that exist). */
export interface ResetSend {
  readonly sendMail: true;
  readonly retryable: false;
  /** The identifier as the user typed it. */
  readonly identifier: string;
  /** The client's answer. */
  readonly answer: Answer;
  /** Never set when a mail is due (here so `outcome.error` reads on either kind). */
  readonly error?: undefined;
}

/** No mail: an unknown account, the daemon's refusal, a form without the field, or a retryable failure. */
export interface ResetNoMail {
  readonly sendMail: false;
  /** The daemon or the lookup could not answer now: 503 with `Retry-After` (says nothing of the account). */
  readonly retryable: boolean;
  /** The identifier as the user typed it; `undefined` when the form had none. */
  readonly identifier: string | undefined;
  /** The client's answer, when the daemon was asked. */
  readonly answer?: Answer;
  /** What `lookupUser` threw, or a `PortcullisExpressError` naming `lookupTimeoutMs` when it did not settle in time: for the app's own log. */
  readonly error?: unknown;
}

async function decide(o: Resolved, req: Request): Promise<ResetOutcome> {
  const identifier = formField(req, o.identifierField);
  const key = clientKey(req);
  if (identifier === undefined || identifier === '' || key === undefined) {
    return { sendMail: false, retryable: false, identifier };
  }
  const answer = await o.client.passwordResetRequest(o.realm, identifier, key, {
    traceparent: typeof req.headers?.traceparent === 'string' ? req.headers.traceparent : undefined,
  });
  if (!answer.isAllowed()) {
    return { sendMail: false, retryable: answer.retryable, identifier, answer };
  }
  const looked = await storedHash(o, identifier, req);
  if ('error' in looked) {
    return { sendMail: false, retryable: true, identifier, answer, error: looked.error };
  }
  if (looked.hash === '') {
    return { sendMail: false, retryable: false, identifier, answer };
  }
  return { sendMail: true, retryable: false, identifier, answer };
}

/** The reset middleware for `o`: sets `res.locals.portcullisReset`, then `next()`; never `next(err)`. */
export function resetMiddleware(o: Resolved): RequestHandler {
  return (req: Request, res: Response, next: NextFunction): void => {
    res.set('Cache-Control', 'no-store');
    void decide(o, req)
      .catch((error: unknown): ResetOutcome => ({ sendMail: false, retryable: true, identifier: undefined, error }))
      .then((outcome) => {
        res.locals.portcullisReset = outcome;
        next();
      });
  };
}

/** The reset outcome the middleware left for this response; no mail and retryable when it did not run. */
export function resetOutcome(res: Response): ResetOutcome {
  const outcome: unknown = res.locals?.portcullisReset;
  if (typeof outcome === 'object' && outcome !== null && typeof (outcome as ResetOutcome).sendMail === 'boolean') {
    return outcome as ResetOutcome;
  }
  return { sendMail: false, retryable: true, identifier: undefined };
}
