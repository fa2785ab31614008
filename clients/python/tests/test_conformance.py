"""clients/conformance.json, every case, against the sync and the asyncio client: each
case's endpoint is started here (tests/faults.py) and the client's decision, its kind
(a challenge or a required change is a deny of its own), the tokens it carries, its
retryable mark, its retries, the flow sent and the attempt_ids the endpoint saw are
checked."""

from __future__ import annotations

import time
import uuid

import pytest

from calls import call_async, call_sync
from conftest import load_conformance
from faults import endpoint_for
from portcullis_client import AnswerKind, AsyncClient, Client, ClientConfig, Decision, Flow

TABLE = load_conformance()
CASES = TABLE["cases"]
DEADLINE = TABLE["call_deadline_ms"] / 1000
# grpc's own deadline fires on time; this is scheduling slack on a loaded machine.
SLACK = 0.5
#: The calls that carry an attempt_id.
COUNTING = ("RecordAttempt", "Verify", "RecordFlowAttempt")


def config(url: str) -> ClientConfig:
    return ClientConfig(endpoints=(url,), call_timeout=DEADLINE)


def check(case: dict, answer, elapsed: float, endpoint, stats) -> None:
    name = case["name"]
    assert answer.decision is Decision(case["expect"]), name
    assert answer.kind is AnswerKind(case.get("kind", case["expect"])), name
    assert answer.allowed is (case["expect"] == "allow"), name
    assert answer.retryable is case["retryable"], name
    # The tokens: a challenge carries its challenge token; only an allow carries a device
    # token (a confirmed device's is the one the endpoint sent).
    sent = case.get("answer") or {}
    want_challenge = sent.get("challenge_token") if answer.kind is AnswerKind.CHALLENGE else None
    assert answer.challenge_token == want_challenge, name
    if answer.kind is not AnswerKind.ALLOW:
        assert answer.device_token is None and answer.needs_rehash is False, name
    elif case["rpc"] == "ConfirmDevice":
        assert answer.device_token == sent["device_token"], name
    if case["rpc"] == "RecordFlowAttempt" and endpoint.seen.flows:
        want = Flow[case.get("flow", "second_factor").upper()].value
        assert set(endpoint.seen.flows) == {want}, f"{name}: flows sent {endpoint.seen.flows}"
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
            tries = len(endpoint.seen.requests)
            assert 1 <= tries <= 1 + stats.retries, f"{name}: {tries} tries seen, {stats.retries} retries"
            if case["rpc"] in COUNTING:
                assert len(ids) == tries, f"{name}: {len(ids)} attempt_ids in {tries} tries"
    else:
        assert stats.retries == 0, f"{name}: retried {stats.retries} times"
        if "unreachable" not in fault:
            # An answer, a status or a late answer: the daemon saw exactly one try.
            assert len(endpoint.seen.requests) == 1, f"{name}: {len(endpoint.seen.requests)} tries"
            if case["rpc"] in COUNTING:
                assert len(ids) == 1, name


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_sync_client(case: dict) -> None:
    endpoint = endpoint_for(case)
    try:
        with Client(config(endpoint.url)) as client:
            start = time.monotonic()
            answer = call_sync(client, case["rpc"], case.get("flow"))
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
            answer = await call_async(client, case["rpc"], case.get("flow"))
            elapsed = time.monotonic() - start
            check(case, answer, elapsed, endpoint, client.stats())
    finally:
        endpoint.close()


def test_the_table_is_not_empty_and_covers_every_fault() -> None:
    kinds = {k for c in CASES for k in (c.get("fault") or {"answer": 1})}
    assert {"answer", "status", "reset", "delay_ms", "unreachable", "garbage"} <= kinds
    assert len(CASES) >= 40
    rpcs = {c["rpc"] for c in CASES}
    assert {"Admit", "RecordAttempt", "Verify", "ClearAttempts", "RecordFlowAttempt", "ClearFlow", "ConfirmDevice"} <= rpcs
    flows = {c.get("flow", "second_factor") for c in CASES if c["rpc"] == "RecordFlowAttempt"}
    assert flows == {f.name.lower() for f in Flow}
    assert {c["kind"] for c in CASES if "kind" in c} == {"challenge", "change_required"}
    # A kind of its own is a Verify deny, always.
    assert all(c["expect"] == "deny" and c["rpc"] == "Verify" for c in CASES if "kind" in c)
