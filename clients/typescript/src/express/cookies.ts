// The device cookie (docs/devices.md, "For gateway authors"): the device token an
// accept or a confirmed challenge returned, kept by the browser (HttpOnly, Secure,
// SameSite=Lax) and sent back on its next login to that account.

import { createHmac } from 'node:crypto';
import type { Request, Response } from 'express';

import type { Resolved } from './options';

/**
 * The device cookie's name for one account: the configured name, `-`, and 16 hex
 * digits of HMAC-SHA-256, keyed with `deviceCookie.secret`, over the realm and the
 * identifier as typed, trimmed and lowercased. Keyed, so that whoever sees a Cookie
 * header cannot confirm a guessed identifier by computing the name. Two spellings the
 * daemon counts as one account but this folds apart only cost a challenge (a new
 * device to the daemon); two accounts folded together only replace each other's token,
 * which the daemon then refuses as another account's.
 */
export function deviceCookieName(o: Pick<Resolved, 'cookieName' | 'cookieSecret' | 'realm'>, identifier: string): string {
  const digest = createHmac('sha256', o.cookieSecret)
    .update('portcullis device cookie\0')
    .update(o.realm)
    .update('\0')
    .update(identifier.trim().toLowerCase())
    .digest('hex');
  return `${o.cookieName}-${digest.slice(0, 16)}`;
}

/** The value of cookie `name` in the request's `Cookie` header, URL-decoded; `undefined` when absent or not decodable. */
export function readCookie(req: Request, name: string): string | undefined {
  const header = req.headers?.cookie;
  if (typeof header !== 'string') return undefined;
  for (const pair of header.split(';')) {
    const eq = pair.indexOf('=');
    if (eq < 0 || pair.slice(0, eq).trim() !== name) continue;
    let value = pair.slice(eq + 1).trim();
    if (value.startsWith('"') && value.endsWith('"') && value.length >= 2) value = value.slice(1, -1);
    try {
      return decodeURIComponent(value);
    } catch {
      return undefined;
    }
  }
  return undefined;
}

/** Sets the account's device cookie to `token` (HttpOnly, Secure, SameSite=Lax, Path=/). */
export function writeDeviceCookie(o: Resolved, res: Response, identifier: string, token: string): void {
  res.cookie(deviceCookieName(o, identifier), token, {
    httpOnly: true,
    secure: true,
    sameSite: 'lax',
    path: '/',
    maxAge: o.cookieMaxAgeMs,
  });
}
