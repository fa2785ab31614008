// The Express integration's settings, checked once when the middleware is made, and
// what every route reads from a request: the client key and the form's fields.

import type { Request } from 'express';

import type { Client } from '../client';
import { canonical } from '../clientKey';

/** The device cookie (docs/devices.md): one per account a browser signed in to. */
export interface DeviceCookieOptions {
  /**
   * Required: the key of the HMAC that names each account's cookie, at least 32 bytes
   * (a string counts its UTF-8 bytes), of the app's own (say 32 random bytes, hex;
   * never the daemon's key secret), the same on every replica. Without a key anyone who
   * sees a Cookie header could confirm a guessed identifier. Rotating it renames every
   * cookie: each browser's device is unknown once (a challenge in a step-up realm, as a
   * new device gets; never a weaker deny), and the old cookies expire unused.
   */
  secret: string | Uint8Array;
  /**
   * The cookie's name, to which `-` and 16 hex digits of an HMAC of the realm and the
   * identifier are added, so a browser keeps one token per account and the name does
   * not show the identifier (default `__Host-portcullis-device`; `__Host-` makes the
   * browser refuse it from a subdomain or over plain HTTP). RFC 6265 token characters.
   */
  name?: string;
  /** How long the browser keeps it, in milliseconds (default 90 days: the daemon's default `device_token_ttl`). */
  maxAgeMs?: number;
}

/** What the login and reset middleware need. */
export interface PortcullisExpressOptions {
  /** The client the middleware calls the daemon with (one per process, shared). */
  client: Client;
  /** The realm the accounts belong to. */
  realm: string;
  /**
   * The stored hash (bcrypt, argon2 or another format docs/verify.md lists) of the account `identifier` names,
   * as the user typed it; `''`, `null` or `undefined` for an unknown or disabled
   * account (the daemon then burns the same hash work and answers a reject: no
   * oracle). It may be async. If it throws or rejects, the login is refused
   * (retryable) and the reset sends no mail; the error is handed to the route's
   * handler as the outcome's `error`, never logged here. A hash the daemon refuses (a
   * format it does not verify, such as `md5$…`, or one above its cost ceilings) is
   * asked again as `''`, so that account answers as an unknown one (`onEvent` is told).
   */
  lookupUser: (identifier: string, req: Request) => string | null | undefined | Promise<string | null | undefined>;
  /**
   * How long `lookupUser` may take, in milliseconds (default 2000, at most 60000). One
   * that has not settled by then is treated as one that threw: the login is refused
   * (retryable, its `error` a `PortcullisExpressError` naming `lookupTimeoutMs`) and the
   * reset sends no mail, so a user store that hangs never hangs the request.
   */
  lookupTimeoutMs?: number;
  /** The form's field names (default `username` and `password`), read from `req.body`. */
  fields?: { identifier?: string; password?: string };
  /**
   * The realm has `unknown_device = "step_up"`: every refused login that is not
   * retryable becomes a `'challenge'` without a code (`sendCode: false`), so the login
   * form answers a right password from a new device and every wrong one with the same
   * page (docs/devices.md, "No checker"). Default false.
   */
  stepUp?: boolean;
  /** The device cookie: the key of its name (required), its name and lifetime. */
  deviceCookie: DeviceCookieOptions;
  /**
   * Told of what the app should log (`event.error.message` says what happened and what
   * to do); never an identifier, a password, a hash or a token. Called once per event,
   * synchronously; what it throws is ignored.
   */
  onEvent?: (event: PortcullisExpressEvent) => void;
}

/**
 * What the middleware tells `onEvent`.
 *
 * `'unusable_stored_hash'`: `lookupUser` gave a stored hash the daemon refuses (a format
 * it does not verify, such as `md5$…`, or one above its cost ceilings), so the login was
 * asked again with the empty hash, as for an unknown account: that user cannot sign in
 * until a password reset stores a hash the daemon verifies (docs/verify.md).
 */
export interface PortcullisExpressEvent {
  readonly type: 'unusable_stored_hash';
  /** The realm of the login. */
  readonly realm: string;
  /** For the app's log: names the setting and the remedy, never the account or the hash. */
  readonly error: PortcullisExpressError;
}

/** A setting the integration cannot use. The message names the setting, never a secret. */
export class PortcullisExpressError extends Error {
  constructor(
    readonly setting: string,
    message: string,
  ) {
    super(`portcullisExpress.${setting} ${message}`);
    this.name = 'PortcullisExpressError';
  }
}

/** The checked settings. */
export interface Resolved {
  client: Client;
  realm: string;
  lookupUser: PortcullisExpressOptions['lookupUser'];
  lookupTimeoutMs: number;
  identifierField: string;
  passwordField: string;
  stepUp: boolean;
  cookieName: string;
  cookieSecret: Buffer;
  cookieMaxAgeMs: number;
  onEvent: ((event: PortcullisExpressEvent) => void) | undefined;
}

/** RFC 6265's cookie-name token characters. */
const COOKIE_NAME = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const NINETY_DAYS_MS = 90 * 24 * 3600 * 1000;
const LOOKUP_TIMEOUT_MS = 2000;
const MAX_LOOKUP_TIMEOUT_MS = 60000;
/** The shortest `deviceCookie.secret`, in bytes. */
const MIN_COOKIE_SECRET_BYTES = 32;

/** @throws PortcullisExpressError naming the first setting it cannot use. */
export function resolve(options: PortcullisExpressOptions): Resolved {
  if (typeof options !== 'object' || options === null) {
    throw new PortcullisExpressError('options', 'must be an object');
  }
  const { client, realm, lookupUser } = options;
  if (typeof client !== 'object' || client === null || typeof client.verify !== 'function') {
    throw new PortcullisExpressError('client', 'must be a Client');
  }
  if (typeof realm !== 'string' || realm === '') {
    throw new PortcullisExpressError('realm', 'must be a non-empty string');
  }
  if (typeof lookupUser !== 'function') {
    throw new PortcullisExpressError('lookupUser', 'must be a function');
  }
  const field = (setting: string, value: unknown, fallback: string): string => {
    const v = value ?? fallback;
    if (typeof v !== 'string' || v === '') {
      throw new PortcullisExpressError(setting, 'must be a non-empty string');
    }
    return v;
  };
  const cookieName = field('deviceCookie.name', options.deviceCookie?.name, '__Host-portcullis-device');
  if (!COOKIE_NAME.test(cookieName)) {
    throw new PortcullisExpressError('deviceCookie.name', 'is not a cookie name (RFC 6265 token characters)');
  }
  const cookieSecret = cookieKey(options.deviceCookie?.secret);
  const cookieMaxAgeMs = options.deviceCookie?.maxAgeMs ?? NINETY_DAYS_MS;
  if (!Number.isInteger(cookieMaxAgeMs) || cookieMaxAgeMs < 1000) {
    throw new PortcullisExpressError('deviceCookie.maxAgeMs', 'must be a whole number of milliseconds, at least 1000');
  }
  const stepUp = options.stepUp ?? false;
  if (typeof stepUp !== 'boolean') {
    throw new PortcullisExpressError('stepUp', 'must be true or false');
  }
  const lookupTimeoutMs = options.lookupTimeoutMs ?? LOOKUP_TIMEOUT_MS;
  if (!Number.isInteger(lookupTimeoutMs) || lookupTimeoutMs < 1 || lookupTimeoutMs > MAX_LOOKUP_TIMEOUT_MS) {
    throw new PortcullisExpressError('lookupTimeoutMs', `must be a whole number of milliseconds, 1 to ${MAX_LOOKUP_TIMEOUT_MS}`);
  }
  const onEvent = options.onEvent;
  if (onEvent !== undefined && typeof onEvent !== 'function') {
    throw new PortcullisExpressError('onEvent', 'must be a function');
  }
  return {
    client,
    realm,
    lookupUser,
    lookupTimeoutMs,
    identifierField: field('fields.identifier', options.fields?.identifier, 'username'),
    passwordField: field('fields.password', options.fields?.password, 'password'),
    stepUp,
    cookieName,
    cookieSecret,
    cookieMaxAgeMs,
    onEvent,
  };
}

/** `deviceCookie.secret` as the HMAC key (a copy). The message never quotes it. */
function cookieKey(secret: unknown): Buffer {
  const setting = 'deviceCookie.secret';
  if (secret === undefined || secret === null) {
    throw new PortcullisExpressError(setting, `is required: a secret of the app's own, at least ${MIN_COOKIE_SECRET_BYTES} bytes`);
  }
  if (typeof secret !== 'string' && !(secret instanceof Uint8Array)) {
    throw new PortcullisExpressError(setting, 'must be a string or a Uint8Array');
  }
  const key = typeof secret === 'string' ? Buffer.from(secret, 'utf8') : Buffer.from(secret);
  if (key.length < MIN_COOKIE_SECRET_BYTES) {
    throw new PortcullisExpressError(setting, `must be at least ${MIN_COOKIE_SECRET_BYTES} bytes (it has ${key.length})`);
  }
  return key;
}

/** Tells `o.onEvent` of `event`; what it throws changes nothing. */
export function emit(o: Pick<Resolved, 'onEvent'>, event: PortcullisExpressEvent): void {
  try {
    o.onEvent?.(event);
  } catch {
    // The app's hook failing changes no outcome.
  }
}

/**
 * The end client's address: `req.ip`, which follows the app's `trust proxy` setting
 * (set it to the number of proxies of yours in front, never `true` behind a proxy
 * that keeps a client's own `X-Forwarded-For`), written as the daemon reads it (an
 * IPv4-mapped IPv6 address as IPv4). `undefined` when the socket is gone.
 */
export function clientKey(req: Request): string | undefined {
  const ip = req.ip ?? req.socket?.remoteAddress;
  return typeof ip === 'string' && ip !== '' ? canonical(ip) : undefined;
}

/** The form field `name` of a parsed body, when it is a string. */
export function formField(req: Request, name: string): string | undefined {
  const body: unknown = req.body;
  if (typeof body !== 'object' || body === null || !Object.prototype.hasOwnProperty.call(body, name)) {
    return undefined;
  }
  const value: unknown = (body as Record<string, unknown>)[name];
  return typeof value === 'string' ? value : undefined;
}

/**
 * `lookupUser`'s stored hash (`''` for no account), or the error it threw, or a
 * `PortcullisExpressError` naming `lookupTimeoutMs` when it did not settle in time.
 */
export async function storedHash(o: Resolved, identifier: string, req: Request): Promise<{ hash: string } | { error: unknown }> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<{ error: unknown }>((resolve) => {
    timer = setTimeout(
      () =>
        resolve({
          error: new PortcullisExpressError('lookupTimeoutMs', `passed: lookupUser did not settle within ${o.lookupTimeoutMs} ms`),
        }),
      o.lookupTimeoutMs,
    );
  });
  try {
    // What the lookup does later is ignored (its rejection is caught in lookup()).
    return await Promise.race([lookup(o, identifier, req), late]);
  } finally {
    clearTimeout(timer);
  }
}

async function lookup(o: Resolved, identifier: string, req: Request): Promise<{ hash: string } | { error: unknown }> {
  try {
    const hash = await o.lookupUser(identifier, req);
    if (hash === null || hash === undefined) return { hash: '' };
    if (typeof hash !== 'string') return { error: new PortcullisExpressError('lookupUser', 'returned neither a string nor nothing') };
    return { hash };
  } catch (error) {
    return { error };
  }
}
