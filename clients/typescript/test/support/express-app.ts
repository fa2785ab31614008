// A gateway written with the Express integration, as its README shows, for
// express.test.ts (in process) and express-child.ts (a process of its own): POST /login
// and POST /password/reset, one page per outcome. Accounts whose identifier ends with
// KNOWN_DOMAIN exist, with STORED_HASH; every other identifier is unknown.

import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';

import { Client } from '../../src';
import { PortcullisExpress, PortcullisExpressEvent, loginOutcome, portcullisExpress, resetOutcome } from '../../src/express';

/** `correct horse battery staple` (docs/gateways.md's walkthrough). */
export const PASSWORD = 'correct horse battery staple';
export const STORED_HASH = '$argon2id$v=19$m=19456,t=2,p=1$9UYIR9ZIReF5HPUwKOtfHg$mXlw4iTpYMohjtsi7qzPygANdC7/hd1SbLoNsHPwwfQ';
export const KNOWN_DOMAIN = '@known.example';
/** The key of the device cookie's name (every process of the app shares it). */
export const COOKIE_SECRET = 'a test secret of the app, 32 bytes or more';
/** Accounts whose stored hash the daemon refuses, by domain: a legacy format, a bcrypt cost above its ceiling (14). */
export const UNUSABLE_HASHES: Record<string, string> = {
  '@legacy.example': 'md5$salt$5f4dcc3b5aa765d61d8327deb882cf99',
  '@costly.example': '$2b$31$R9h/cIPz0gi.URNNX3kh2OPST9/PgBkqquzi.Ss7KIUgO2t0jWMUW',
};

/** The pages, one per outcome. */
export const PAGES = {
  welcome: 'welcome\n',
  failed: 'invalid username or password\n',
  unavailable: 'try again shortly\n',
  captcha: 'solve the challenge, then sign in again\n',
  secondFactor: 'second factor required\n',
  code: 'we sent a code to your address: enter it to finish signing in (no code? check your password and sign in again)\n',
  reset: 'if an account exists for that name, we have sent it a link to reset its password\n',
};

export interface TestApp {
  url: string;
  client: Client;
  gate: PortcullisExpress;
  /** Identifiers a reset mail was queued for. */
  mails: string[];
  /** Real challenges: a code was sent for each. */
  challenges: Array<{ identifier: string; challengeToken: string; storedHash: string }>;
  /** What lookupUser threw and the handler saw. */
  errors: unknown[];
  /** What the middleware told onEvent. */
  events: PortcullisExpressEvent[];
  close: () => Promise<void>;
}

export interface TestAppOptions {
  daemonUrl: string;
  realm?: string;
  stepUp?: boolean;
  callTimeoutMs?: number;
  /** lookupUser throws for every identifier. */
  lookupThrows?: boolean;
  /** lookupUser never settles. */
  lookupHangs?: boolean;
  lookupTimeoutMs?: number;
}

/** Starts the app on a free loopback port. `trust proxy` is 1: the client key is the address the one proxy in front appended. */
export async function startApp(options: TestAppOptions): Promise<TestApp> {
  const client = new Client({ endpoints: [options.daemonUrl], callTimeoutMs: options.callTimeoutMs ?? 5000 });
  const mails: string[] = [];
  const challenges: TestApp['challenges'] = [];
  const errors: unknown[] = [];
  const events: PortcullisExpressEvent[] = [];
  const gate = portcullisExpress({
    client,
    realm: options.realm ?? 'default',
    stepUp: options.stepUp,
    // Async, as a database lookup is.
    lookupUser: (identifier) => {
      if (options.lookupThrows) return Promise.reject(new Error('the user store is down'));
      if (options.lookupHangs) return new Promise<never>(() => {});
      const id = identifier.trim().toLowerCase();
      const unusable = Object.entries(UNUSABLE_HASHES).find(([domain]) => id.endsWith(domain));
      return Promise.resolve(unusable !== undefined ? unusable[1] : id.endsWith(KNOWN_DOMAIN) ? STORED_HASH : undefined);
    },
    onEvent: (event) => events.push(event),
    deviceCookie: { secret: COOKIE_SECRET },
    lookupTimeoutMs: options.lookupTimeoutMs,
  });
  const app = express();
  app.set('trust proxy', 1);
  const form = express.urlencoded({ extended: false });
  app.post('/login', form, gate.login, (_req, res) => {
    const outcome = loginOutcome(res);
    switch (outcome.kind) {
      case 'allow':
        res.status(200).send(PAGES.welcome);
        return;
      case 'second_factor':
        res.status(200).send(PAGES.secondFactor);
        return;
      case 'challenge':
        if (outcome.sendCode && outcome.challengeToken !== undefined && outcome.storedHash !== undefined) {
          challenges.push({ identifier: outcome.identifier, challengeToken: outcome.challengeToken, storedHash: outcome.storedHash });
        }
        res.status(200).send(PAGES.code);
        return;
      case 'change_required':
        res.redirect(303, '/password/change');
        return;
      case 'deny':
        if (outcome.error !== undefined) errors.push(outcome.error);
        if (outcome.retryable) {
          res.status(503).set('Retry-After', '1').send(PAGES.unavailable);
        } else {
          res.status(401).send(outcome.captcha ? PAGES.captcha : PAGES.failed);
        }
    }
  });
  app.post('/password/reset', form, gate.passwordReset, (_req, res) => {
    const outcome = resetOutcome(res);
    if (outcome.error !== undefined) errors.push(outcome.error);
    if (outcome.retryable) {
      res.status(503).set('Retry-After', '1').send(PAGES.unavailable);
      return;
    }
    if (outcome.sendMail && outcome.identifier !== undefined) {
      // Queued, never sent inline.
      const identifier = outcome.identifier;
      setImmediate(() => mails.push(identifier));
    }
    res.status(200).send(PAGES.reset);
  });
  const server = http.createServer(app);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    client,
    gate,
    mails,
    challenges,
    errors,
    events,
    close: async () => {
      client.close();
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

/** What a browser gets back: status, body, and the headers that could tell outcomes apart. */
export interface Page {
  status: number;
  body: string;
  contentType: string | null;
  cacheControl: string | null;
  setCookie: string[];
}

/** POSTs `fields` as a form from `clientIp` (sent as the one proxy's X-Forwarded-For), with `cookie` if given. */
export async function post(url: string, fields: Record<string, string>, clientIp: string, cookie?: string): Promise<Page> {
  const headers: Record<string, string> = { 'content-type': 'application/x-www-form-urlencoded', 'x-forwarded-for': clientIp };
  if (cookie !== undefined) headers['cookie'] = cookie;
  const r = await fetch(url, { method: 'POST', headers, body: new URLSearchParams(fields).toString(), redirect: 'manual' });
  return {
    status: r.status,
    body: await r.text(),
    contentType: r.headers.get('content-type'),
    cacheControl: r.headers.get('cache-control'),
    setCookie: r.headers.getSetCookie(),
  };
}
