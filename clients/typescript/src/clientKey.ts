// The end client's `clientKey` behind proxies (docs/client.md, "The client key"), the
// same rule as the Rust client's `client_key_from_forwarded`.
//
// `X-Forwarded-For` lists `client, proxy1, proxy2`: each proxy *appends* the address it
// received the request from. Only the entries your own proxies appended are true; the
// leftmost entry is the one a client forges. So the key is read from the *right*: with
// `trustedHops` proxies in front of the gateway (the one that connected to it
// included), the client is the entry `trustedHops - 1` places from the right end.

import { isIPv4, isIPv6 } from 'node:net';

/**
 * The `clientKey` of a request that reached the gateway from `peer` (the socket's
 * remote address) with the `X-Forwarded-For` header value(s) `forwarded` (several
 * headers, in the order received, are one list: RFC 9110 §5.3), behind `trustedHops`
 * proxies of your own (0: clients connect directly, and the header is ignored).
 *
 * When the header holds fewer entries than `trustedHops`, the leftmost entry there is
 * (one of your proxies still appended it), or `peer` when there is none. An entry that
 * is no IP address is returned as written (trimmed): the daemon gives it a bucket of
 * its own. Addresses are canonical: an IPv4-mapped IPv6 address becomes IPv4, IPv6 is
 * written in RFC 5952 form.
 */
export function clientKeyFromForwarded(peer: string, forwarded: string | readonly string[] | undefined, trustedHops: number): string {
  if (!Number.isInteger(trustedHops) || trustedHops < 0) {
    throw new RangeError('trustedHops must be a whole number, 0 or more');
  }
  if (trustedHops === 0) {
    return canonical(peer);
  }
  const values = forwarded === undefined ? [] : typeof forwarded === 'string' ? [forwarded] : forwarded;
  const entries = values
    .flatMap((value) => value.split(','))
    .map((e) => e.trim())
    .filter((e) => e.length > 0);
  // The peer is the last trusted proxy; the entries it and the other trusted proxies
  // appended are the last `trustedHops` ones, the first of them the client.
  const firstTrusted = entries.length - trustedHops;
  if (firstTrusted < 0) {
    return entries.length > 0 ? canonical(entries[0]) : canonical(peer);
  }
  return canonical(entries[firstTrusted]);
}

/** An address as the daemon will read it, or the entry as written. */
export function canonical(entry: string): string {
  if (isIPv4(entry)) {
    return entry;
  }
  if (!entry.includes('%') && isIPv6(entry)) {
    const groups = ipv6Groups(entry);
    if (groups === undefined) {
      return entry;
    }
    // IPv4-mapped (::ffff:a.b.c.d) is the IPv4 address.
    if (groups.slice(0, 5).every((g) => g === 0) && groups[5] === 0xffff) {
      return `${groups[6] >> 8}.${groups[6] & 0xff}.${groups[7] >> 8}.${groups[7] & 0xff}`;
    }
    return formatIpv6(groups);
  }
  return entry;
}

function ipv6Groups(text: string): number[] | undefined {
  let head = text;
  const tail: number[] = [];
  // An embedded IPv4 address in the last 32 bits.
  const lastColon = head.lastIndexOf(':');
  const last = head.slice(lastColon + 1);
  if (last.includes('.')) {
    if (!isIPv4(last)) {
      return undefined;
    }
    const o = last.split('.').map(Number);
    tail.push((o[0] << 8) | o[1], (o[2] << 8) | o[3]);
    head = head.slice(0, lastColon + 1);
    if (head.endsWith(':') && !head.endsWith('::')) {
      head = head.slice(0, -1);
    }
  }
  const parse = (part: string): number[] => (part === '' ? [] : part.split(':').map((g) => parseInt(g, 16)));
  let groups: number[];
  const gap = head.indexOf('::');
  if (gap >= 0) {
    const left = parse(head.slice(0, gap));
    const right = parse(head.slice(gap + 2));
    const zeros = 8 - tail.length - left.length - right.length;
    if (zeros < 0) {
      return undefined;
    }
    groups = [...left, ...new Array<number>(zeros).fill(0), ...right, ...tail];
  } else {
    groups = [...parse(head), ...tail];
  }
  return groups.length === 8 && groups.every((g) => Number.isInteger(g) && g >= 0 && g <= 0xffff) ? groups : undefined;
}

/** RFC 5952: lowercase, no leading zeros, the longest run (2 or more) of zero groups as `::`. */
function formatIpv6(groups: number[]): string {
  let bestStart = -1;
  let bestLen = 0;
  for (let i = 0; i < 8;) {
    if (groups[i] !== 0) {
      i += 1;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j += 1;
    if (j - i > bestLen) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (bestLen < 2) {
    return hex.join(':');
  }
  return `${hex.slice(0, bestStart).join(':')}::${hex.slice(bestStart + bestLen).join(':')}`;
}
