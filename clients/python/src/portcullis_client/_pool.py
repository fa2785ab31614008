"""The endpoint pool (rendezvous routing, passive health, the circuit breaker) and the
retry budget: the Rust client's ``pool.rs``, rule for rule.

Each endpoint is healthy, ejected (after ``eject_after`` consecutive transport failures,
for a back-off that doubles on every failed probe up to ``eject_max``), or probing (its
back-off ran out and one call is trying it). The breaker is open when no endpoint can
take a call. Only transport failures move an endpoint towards ejection; any answer from
the daemon counts as health. The state is guarded by a lock, so one pool serves threads
and an event loop alike.
"""

from __future__ import annotations

import hashlib
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

from ._process import Lock


@dataclass(frozen=True)
class HealthPolicy:
    """When endpoints are ejected and for how long (seconds)."""

    eject_after: int
    eject_for: float
    eject_max: float
    #: How long a probe may stay in flight before another call may probe again.
    probe_timeout: float


@dataclass
class _Health:
    state: str = "healthy"  # healthy | ejected | probing
    failures: int = 0
    until: float = 0.0  # ejected: until when
    since: float = 0.0  # probing: since when
    backoff: float = 0.0


class Pool:
    """The endpoints of one client, their health and the breaker (see the module's text).
    ``clock`` gives monotonic seconds (a fake one in tests)."""

    def __init__(self, urls: list[str], policy: HealthPolicy, clock: Callable[[], float] = time.monotonic) -> None:
        self.urls = list(urls)
        self.policy = policy
        self._health = [_Health() for _ in self.urls]
        self._lock = Lock()
        self._clock = clock

    def ranked(self, route_key: str) -> list[int]:
        """Endpoint indexes in rendezvous (highest random weight) order for
        ``route_key``, over SHA-256 exactly as the Rust client ranks them, so Python and
        Rust gateways route a key to the same daemon."""
        scored: list[tuple[int, int]] = []
        key = route_key.encode("utf-8")
        for i, url in enumerate(self.urls):
            u = url.encode("utf-8")
            digest = hashlib.sha256(struct.pack(">I", len(u)) + u + key).digest()
            scored.append((int.from_bytes(digest[:8], "big"), i))
        scored.sort(reverse=True)
        return [i for _, i in scored]

    def pick(self, route_key: str, tried: list[int]) -> int | None:
        """The endpoint for the next try, preferring endpoints not in ``tried``.
        ``None`` when the breaker is open."""
        ranked = self.ranked(route_key)
        order = [i for i in ranked if i not in tried] + [i for i in ranked if i in tried]
        with self._lock:
            now = self._clock()
            for i in order:
                h = self._health[i]
                if h.state == "healthy":
                    return i
                if h.state == "ejected" and h.until <= now:
                    h.state, h.since = "probing", now
                    return i
                if h.state == "probing" and now - h.since >= self.policy.probe_timeout:
                    h.since = now
                    return i
        return None

    def route(self, route_key: str) -> str | None:
        """Which endpoint a call routed by ``route_key`` would use now, without claiming
        a probe; ``None`` when the breaker is open."""
        with self._lock:
            now = self._clock()
            for i in self.ranked(route_key):
                h = self._health[i]
                if h.state == "healthy" or (h.state == "ejected" and h.until <= now):
                    return self.urls[i]
        return None

    def answered(self, i: int) -> None:
        """Endpoint ``i`` answered (any answer, a status included): healthy again."""
        with self._lock:
            self._health[i] = _Health()

    def failed(self, i: int) -> bool:
        """A transport failure on endpoint ``i``; ``True`` when this ejected it."""
        p = self.policy
        with self._lock:
            now = self._clock()
            h = self._health[i]
            if h.state == "healthy":
                if h.failures + 1 < p.eject_after:
                    h.failures += 1
                    return False
                self._health[i] = _Health("ejected", until=now + p.eject_for, backoff=p.eject_for)
                return True
            was_probing = h.state == "probing"
            backoff = min(h.backoff * 2, p.eject_max)
            self._health[i] = _Health("ejected", until=now + backoff, backoff=backoff)
            return was_probing

    def healthy(self) -> list[bool]:
        """Whether each endpoint is healthy now, in configuration order."""
        with self._lock:
            return [h.state == "healthy" for h in self._health]

    def breaker_open(self) -> bool:
        """Whether no endpoint can take a call now."""
        with self._lock:
            now = self._clock()
            for h in self._health:
                if h.state == "healthy":
                    return False
                if h.state == "ejected" and h.until <= now:
                    return False
                if h.state == "probing" and now - h.since >= self.policy.probe_timeout:
                    return False
            return True


class RetryBudget:
    """A token bucket that holds at most ``reserve`` tokens, gains ``ratio`` of a token
    per call and spends one per retry (the shape of gRPC's retry throttling, gRFC A6).
    Kept in thousandths, like the Rust client, so ten deposits of 0.1 make one token."""

    def __init__(self, ratio: float, reserve: int) -> None:
        self._milli_reserve = int(reserve) * 1000
        self._milli_ratio = round(ratio * 1000)
        self._milli_tokens = self._milli_reserve
        self._lock = Lock()

    def deposit(self) -> None:
        """A call was made: the bucket earns ``ratio`` of a token."""
        with self._lock:
            self._milli_tokens = min(self._milli_tokens + self._milli_ratio, self._milli_reserve)

    def withdraw(self) -> bool:
        """Takes a token for a retry; ``False`` when the bucket holds less than one."""
        with self._lock:
            if self._milli_tokens >= 1000:
                self._milli_tokens -= 1000
                return True
            return False
