// The endpoint pool: rendezvous routing, passive health and the circuit breaker, and
// the retry budget; the same shapes as the Rust client's `pool.rs`.
//
// Each endpoint is healthy, ejected (after `ejectAfter` consecutive transport failures,
// for a back-off that doubles on every failed probe up to `ejectMax`), or probing (its
// back-off ran out and one call is trying it). The breaker is open when no endpoint can
// take a call. Only transport failures move an endpoint towards ejection; any answer
// from the daemon, whatever it says, counts as health.

import { createHash } from 'node:crypto';

type Health =
  | { state: 'healthy'; failures: number }
  | { state: 'ejected'; until: number; backoff: number }
  | { state: 'probing'; since: number; backoff: number };

export interface HealthPolicy {
  ejectAfter: number;
  ejectForMs: number;
  ejectMaxMs: number;
  /** How long a probe may stay in flight before another call may probe again. */
  probeTimeoutMs: number;
}

/** A monotonic clock in milliseconds. */
export type Clock = () => number;
export const monotonicMs: Clock = () => performance.now();

export class Pool {
  private readonly health: Health[];

  constructor(
    readonly urls: readonly string[],
    private readonly policy: HealthPolicy,
    private readonly now: Clock = monotonicMs,
    private readonly onEjected: (index: number) => void = () => {},
  ) {
    this.health = urls.map(() => ({ state: 'healthy', failures: 0 }));
  }

  /**
   * Endpoint indexes in rendezvous (highest random weight) order for `routeKey`: the
   * score of an endpoint is the first 8 bytes (big-endian) of
   * SHA-256(u32 BE length of its URL ‖ URL ‖ routeKey), highest first, ties by the
   * higher index, exactly as the Rust client ranks them, so gateways in either language
   * route a key to the same daemon.
   */
  ranked(routeKey: string): number[] {
    const scored = this.urls.map((url, index) => {
      const urlBytes = Buffer.from(url, 'utf8');
      const len = Buffer.alloc(4);
      len.writeUInt32BE(urlBytes.length);
      const digest = createHash('sha256').update(len).update(urlBytes).update(Buffer.from(routeKey, 'utf8')).digest();
      return { score: digest.readBigUInt64BE(0), index };
    });
    scored.sort((a, b) => (a.score === b.score ? b.index - a.index : a.score < b.score ? 1 : -1));
    return scored.map((s) => s.index);
  }

  /**
   * The endpoint for the next try of a call routed by `routeKey`, preferring endpoints
   * not in `tried`. `undefined` when the breaker is open.
   */
  pick(routeKey: string, tried: readonly number[]): number | undefined {
    const now = this.now();
    const ranked = this.ranked(routeKey);
    const order = [...ranked.filter((i) => !tried.includes(i)), ...ranked.filter((i) => tried.includes(i))];
    for (const i of order) {
      const h = this.health[i];
      switch (h.state) {
        case 'healthy':
          return i;
        case 'ejected':
          if (h.until <= now) {
            this.health[i] = { state: 'probing', since: now, backoff: h.backoff };
            return i;
          }
          break;
        case 'probing':
          if (now - h.since >= this.policy.probeTimeoutMs) {
            this.health[i] = { state: 'probing', since: now, backoff: h.backoff };
            return i;
          }
          break;
      }
    }
    return undefined;
  }

  /** Which endpoint a call routed by `routeKey` would use now, without claiming a probe. */
  route(routeKey: string): string | undefined {
    const now = this.now();
    for (const i of this.ranked(routeKey)) {
      const h = this.health[i];
      if (h.state === 'healthy' || (h.state === 'ejected' && h.until <= now)) {
        return this.urls[i];
      }
    }
    return undefined;
  }

  /** The endpoint answered (with anything at all): healthy again. */
  answered(index: number): void {
    this.health[index] = { state: 'healthy', failures: 0 };
  }

  /** A transport failure (connect, reset, not HTTP/2, timeout) on this endpoint. */
  failed(index: number): void {
    const p = this.policy;
    const now = this.now();
    const h = this.health[index];
    if (h.state === 'healthy') {
      if (h.failures + 1 < p.ejectAfter) {
        this.health[index] = { state: 'healthy', failures: h.failures + 1 };
      } else {
        this.onEjected(index);
        this.health[index] = { state: 'ejected', until: now + p.ejectForMs, backoff: p.ejectForMs };
      }
      return;
    }
    if (h.state === 'probing') {
      this.onEjected(index);
    }
    const backoff = Math.min(h.backoff * 2, p.ejectMaxMs);
    this.health[index] = { state: 'ejected', until: now + backoff, backoff };
  }

  /** Whether each endpoint is healthy now, in configuration order. */
  healthy(): boolean[] {
    return this.health.map((h) => h.state === 'healthy');
  }

  /** Whether the breaker is open: no endpoint can take a call now. */
  breakerOpen(): boolean {
    const now = this.now();
    return this.health.every((h) => {
      switch (h.state) {
        case 'healthy':
          return false;
        case 'ejected':
          return h.until > now;
        case 'probing':
          return now - h.since < this.policy.probeTimeoutMs;
      }
    });
  }
}

/**
 * The retry budget: a token bucket that holds at most `reserve` tokens, gains `ratio`
 * of a token per call and spends one per retry, so retries stay below `ratio` of calls
 * in the long run, with bursts of at most `reserve` (gRFC A6's retry throttling shape).
 * Kept in thousandths of a token, as integers, like the Rust client, so ten deposits of
 * 0.1 make exactly one token.
 */
export class RetryBudget {
  private milliTokens: number;
  private readonly milliRatio: number;
  private readonly milliReserve: number;

  constructor(ratio: number, reserve: number) {
    this.milliReserve = reserve * 1000;
    this.milliRatio = Math.round(ratio * 1000);
    this.milliTokens = this.milliReserve;
  }

  /** One call was made. */
  deposit(): void {
    this.milliTokens = Math.min(this.milliTokens + this.milliRatio, this.milliReserve);
  }

  /** Takes a token for one retry, if there is one. */
  withdraw(): boolean {
    if (this.milliTokens >= 1000) {
      this.milliTokens -= 1000;
      return true;
    }
    return false;
  }
}
