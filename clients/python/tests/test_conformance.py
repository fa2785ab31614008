"""clients/conformance.json, every case, against the sync and the asyncio client: each
case's endpoint is started here (tests/faults.py) and the client's decision, its
retryable mark, its retries and the attempt_ids the endpoint saw are checked."""

from __future__ import annotations

import time
import uuid

import pytest

from calls import call_async, call_sync
from conftest import load_conformance
from faults import endpoint_for
from portcullis_client import AsyncClient, Client, ClientConfig, Decision

TABLE = load_conformance()
CASES = TABLE["cases"]
DEADLINE = TABLE["call_deadline_ms"] / 1000
# grpc's own deadline fires on time; this is scheduling slack on a loaded machine.
SLACK = 0.5


def config(url: str) -> ClientConfig:
    return ClientConfig(endpoints=(url,), call_timeout=DEADLINE)


def check(case: dict, answer, elapsed: float, endpoint, stats) -> None:
    name = case["name"]
    assert answer.decision is Decision(case["expect"]), name
    assert answer.retryable is case["retryable"], name
    assert elapsed < DEADLINE + SLACK, f"{name}: answered after {elapsed:.3f} s"
    ids = endpoint.seen.attempt_ids()
    # One attempt_id per logical call, a uuid4, the same on every try that was seen.
    assert len(set(ids)) <= 1, f"{name}: several attempt_ids {ids}"
    for a in set(ids):
        assert uuid.UUID(a).version == 4, name
    fault = case.get("fault") or {}
    if case.get("retried_with_same_attempt_id"):
        assert stats.retries >= 1, f"{name}: a transport failure was not retried"
        assert stats.retries <= 2, name  # max_retries
        if fault.get("reset"):
            # The request arrived, and every try that reached the endpoint carried the
            # same id (a retry can also fail on the dying connection or while grpc
            # reconnects, before it reaches the endpoint: usually all 3 arrive).
            assert 1 <= len(ids) <= 1 + stats.retries, f"{name}: {len(ids)} tries seen, {stats.retries} retries"
    else:
        assert stats.retries == 0, f"{name}: retried {stats.retries} times"
        if "unreachable" not in fault:
            # An answer, a status or a late answer: the daemon saw exactly one try.
            assert len(endpoint.seen.requests) == 1, f"{name}: {len(endpoint.seen.requests)} tries"
            if case["rpc"] in ("RecordAttempt", "Verify"):
                assert len(ids) == 1, name


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_sync_client(case: dict) -> None:
    endpoint = endpoint_for(case)
    try:
        with Client(config(endpoint.url)) as client:
            start = time.monotonic()
            answer = call_sync(client, case["rpc"])
            elapsed = time.monotonic() - start
            check(case, answer, elapsed, endpoint, client.stats())
    finally:
        endpoint.close()


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
@pytest.mark.asyncio
async def test_asyncio_client(case: dict) -> None:
    endpoint = endpoint_for(case)
    try:
        async with AsyncClient(config(endpoint.url)) as client:
            start = time.monotonic()
            answer = await call_async(client, case["rpc"])
            elapsed = time.monotonic() - start
            check(case, answer, elapsed, endpoint, client.stats())
    finally:
        endpoint.close()


def test_the_table_is_not_empty_and_covers_every_fault() -> None:
    kinds = {k for c in CASES for k in (c.get("fault") or {"answer": 1})}
    assert {"answer", "status", "reset", "delay_ms", "unreachable", "garbage"} <= kinds
    assert len(CASES) >= 40
