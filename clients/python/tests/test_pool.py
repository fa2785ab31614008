"""The retry budget, rendezvous routing, ejection and the breaker (client/src/pool.rs's
tests, on a fake clock)."""

from portcullis_client._pool import HealthPolicy, Pool, RetryBudget


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def pool(n: int, eject_for: float, clock=None) -> Pool:
    urls = [f"http://127.0.0.1:{40000 + i}" for i in range(n)]
    policy = HealthPolicy(eject_after=2, eject_for=eject_for, eject_max=eject_for * 8, probe_timeout=5.0)
    return Pool(urls, policy, clock=clock or Clock())


def test_routing_is_stable_and_ejection_moves_only_that_endpoints_keys() -> None:
    p = pool(3, 60.0)
    keys = [f"10.1.{i // 256}.{i % 256}" for i in range(3000)]
    before = [p.route(k) for k in keys]
    assert before == [p.route(k) for k in keys]
    for i in range(3):
        n = sum(1 for u in before if u.endswith(str(40000 + i)))
        assert n > 800, f"endpoint {i} got {n} of 3000 keys"
    p.failed(1)
    p.failed(1)
    assert p.healthy() == [True, False, True]
    ejected = p.urls[1]
    for k, b in zip(keys, before):
        now = p.route(k)
        if b == ejected:
            assert now != ejected
        else:
            assert now == b, "a key of a healthy endpoint moved"


def test_breaker_opens_when_all_are_ejected_and_half_opens_after_backoff() -> None:
    clock = Clock()
    p = pool(1, 0.05, clock)
    assert not p.breaker_open()
    pick = p.pick("k", [])
    p.failed(pick)
    assert not p.breaker_open(), "one failure is below eject_after"
    p.failed(pick)
    assert p.breaker_open()
    assert p.pick("k", []) is None
    clock.now += 0.06
    probe = p.pick("k", [])
    assert probe is not None
    assert p.pick("k", []) is None, "a second probe while the first is in flight"
    p.failed(probe)
    assert p.breaker_open(), "a failed probe ejects again, for longer"
    clock.now += 0.06
    assert p.breaker_open(), "the back-off doubled to 100 ms"
    clock.now += 0.06
    probe = p.pick("k", [])
    p.answered(probe)
    assert not p.breaker_open()
    assert p.healthy() == [True]


def test_retry_budget_is_a_ratio_of_calls_with_a_reserve() -> None:
    b = RetryBudget(0.1, 2)
    assert b.withdraw() and b.withdraw()
    assert not b.withdraw(), "reserve spent"
    for _ in range(9):
        b.deposit()
    assert not b.withdraw(), "0.9 of a token"
    b.deposit()
    assert b.withdraw()
    for _ in range(1000):
        b.deposit()
    assert b.withdraw() and b.withdraw() and not b.withdraw(), "capped at the reserve"


def test_rendezvous_rank_is_sha256_of_len_url_key() -> None:
    # The Rust client's formula, computed independently: u64 BE of the first 8 bytes of
    # SHA-256(u32 BE len(url) || url || key), highest first.
    import hashlib

    p = pool(3, 1.0)
    key = "203.0.113.7"

    def score(url: str) -> int:
        u = url.encode()
        return int.from_bytes(hashlib.sha256(len(u).to_bytes(4, "big") + u + key.encode()).digest()[:8], "big")

    expected = sorted(range(3), key=lambda i: score(p.urls[i]), reverse=True)
    assert p.ranked(key) == expected
