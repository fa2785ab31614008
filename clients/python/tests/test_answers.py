"""Beyond the table: Verify's signals are carried, no answer has a truth value, bad
input is a deny, the breaker denies without a network call, and no password appears
in any repr, log line or error."""

from __future__ import annotations

import logging

import pytest

from calls import PASSWORD, call_async, call_sync
from faults import AnswerEndpoint, ClosedPort, RawEndpoint
from portcullis_client import (
    Answer,
    AnswerKind,
    AsyncClient,
    Client,
    ClientConfig,
    ConfigError,
    Decision,
    PasswordCheckResult,
)

SIGNALS = dict(needs_rehash=True, device_token="dev-token-123", spray_suspected=True, step_up=True, network_throttled=True, password_breached=True)
# What the attempt did to its record's door: for the gateway, on a deny.
DOOR = dict(lockout_started=True, ceiling_reached=True)


def client(url: str, **kw) -> Client:
    return Client(ClientConfig(endpoints=(url,), call_timeout=1.0, **kw))


def test_an_accept_carries_every_signal() -> None:
    e = AnswerEndpoint(answer=dict(verdict=1, **SIGNALS, **DOOR))
    try:
        with client(e.url) as c:
            a = call_sync(c, "Verify")
    finally:
        e.close()
    assert a.allowed and a.is_allowed() and a.decision is Decision.ALLOW
    assert (a.lockout_started, a.ceiling_reached) == (False, False), "a match shut no door"
    assert (a.needs_rehash, a.device_token, a.spray_suspected, a.step_up, a.network_throttled, a.password_breached) == (
        True, "dev-token-123", True, True, True, True,
    )
    assert "dev-token-123" not in repr(a) and "<redacted>" in repr(a)


@pytest.mark.parametrize("verdict", [0, 2, 5, 99])
def test_a_reject_or_unknown_verdict_carries_advice_only(verdict: int) -> None:
    e = AnswerEndpoint(answer=dict(verdict=verdict, **SIGNALS, **DOOR))
    try:
        with client(e.url) as c:
            a = call_sync(c, "Verify")
    finally:
        e.close()
    assert a.decision is Decision.DENY and a.kind is AnswerKind.DENY and not a.retryable
    # Advice for the next attempt; never the accept-only fields.
    assert (a.spray_suspected, a.step_up, a.network_throttled) == (True, True, True)
    assert (a.needs_rehash, a.device_token, a.password_breached) == (False, None, False)
    assert (a.lockout_started, a.ceiling_reached) == (True, True)


@pytest.mark.asyncio
async def test_record_attempt_carries_step_up_on_the_asyncio_client() -> None:
    e = AnswerEndpoint(answer=dict(decision=2, step_up=True, network_throttled=True, **DOOR))
    try:
        async with AsyncClient(ClientConfig(endpoints=(e.url,), call_timeout=1.0)) as c:
            a = await call_async(c, "RecordAttempt")
    finally:
        e.close()
    assert a.decision is Decision.DENY and a.step_up and a.network_throttled
    assert a.lockout_started and a.ceiling_reached


@pytest.mark.parametrize(
    "reason, result",
    [(1, PasswordCheckResult.ACCEPTABLE), (2, PasswordCheckResult.BREACHED), (3, PasswordCheckResult.CONTEXT_WORD), (0, PasswordCheckResult.UNCHECKED), (9, PasswordCheckResult.UNCHECKED)],
)
def test_check_password_accepts_only_ok(reason: int, result) -> None:
    e = AnswerEndpoint(answer=dict(reason=reason))
    try:
        with client(e.url) as c:
            check = call_sync(c, "CheckPassword")
    finally:
        e.close()
    assert check.result is result
    assert check.acceptable is (result is PasswordCheckResult.ACCEPTABLE)


def test_check_password_failures_are_unchecked_and_marked() -> None:
    e = AnswerEndpoint(status=9)  # FAILED_PRECONDITION: no breach filter configured
    try:
        with client(e.url) as c:
            assert call_sync(c, "CheckPassword").result is PasswordCheckResult.UNCHECKED
    finally:
        e.close()
    with client(ClosedPort().url) as c:
        check = call_sync(c, "CheckPassword")
    assert check.result is PasswordCheckResult.UNCHECKED and check.retryable


def test_no_answer_has_a_truth_value() -> None:
    with pytest.raises(TypeError):
        bool(Answer.deny(False))
    with pytest.raises(TypeError):
        if Answer.allow():  # noqa: SIM108 - the mistake this guards against
            pass


def test_the_breaker_opens_and_denies_without_a_network_call() -> None:
    port = ClosedPort()
    with client(port.url, eject_after=3, eject_for=60.0) as c:
        first = call_sync(c, "RecordAttempt")  # 3 tries: ejected
        second = call_sync(c, "RecordAttempt")
        stats = c.stats()
    assert first.decision is second.decision is Decision.DENY
    assert first.retryable and second.retryable
    assert stats.breaker_open and stats.breaker_denials == 1 and stats.healthy == [False]
    assert stats.transport_failures == 3  # the second call made none


def test_answered_statuses_never_eject() -> None:
    e = AnswerEndpoint(status=8)  # RESOURCE_EXHAUSTED
    try:
        with client(e.url, eject_after=1) as c:
            answers = [call_sync(c, "Verify") for _ in range(20)]
            stats = c.stats()
    finally:
        e.close()
    assert all(a.decision is Decision.DENY and a.retryable for a in answers)
    assert len(e.seen.requests) == 20 and stats.retries == 0 and stats.healthy == [True]


@pytest.mark.asyncio
async def test_a_status_the_daemon_sent_is_on_the_deny_with_its_message() -> None:
    import grpc

    e = AnswerEndpoint(status=3)  # INVALID_ARGUMENT
    try:
        with client(e.url) as c:
            sync = call_sync(c, "Verify")
        async with AsyncClient(ClientConfig(endpoints=(e.url,), call_timeout=1.0)) as ac:
            aio = await call_async(ac, "Verify")
    finally:
        e.close()
    for a in (sync, aio):
        assert a.decision is Decision.DENY and a.kind is AnswerKind.DENY and not a.retryable
        assert (a.status_code, a.status_details) == (grpc.StatusCode.INVALID_ARGUMENT, "refused by the fault endpoint")
        assert "INVALID_ARGUMENT" in repr(a) and "fault endpoint" not in repr(a)
        assert a == Answer.deny(False)  # the status is no part of the answer's value
    # No status when nothing answered; none on anything but a plain deny.
    with client(ClosedPort().url) as c:
        assert call_sync(c, "Verify").status_code is None
    with pytest.raises(ValueError):
        Answer(Decision.ALLOW, status_code=grpc.StatusCode.INVALID_ARGUMENT)


def test_a_caller_attempt_id_is_sent_as_given_on_every_try() -> None:
    e = RawEndpoint("reset", "RecordAttempt")
    try:
        with client(e.url) as c:
            call_sync(c, "RecordAttempt", attempt_id="gateway-chosen-id")
            retries = c.stats().retries
    finally:
        e.close()
    ids = e.seen.attempt_ids()
    assert retries == 2 and 1 <= len(ids) <= 3 and set(ids) == {"gateway-chosen-id"}


def test_each_logical_call_has_its_own_attempt_id() -> None:
    e = AnswerEndpoint(answer=dict(decision=1))
    try:
        with client(e.url) as c:
            for _ in range(3):
                call_sync(c, "RecordAttempt")
    finally:
        e.close()
    assert len(set(e.seen.attempt_ids())) == 3


def test_bad_input_is_a_deny_that_names_the_field_not_the_value(caplog) -> None:
    caplog.set_level(logging.DEBUG)
    e = AnswerEndpoint(answer=dict(verdict=1))
    try:
        with client(e.url) as c:
            a = c.verify(realm="default", identifier="a@example.com", password=PASSWORD, stored_hash=b"not-a-str", client_key="c")
            b = c.verify(realm="default", identifier="a@example.com", password=12345, stored_hash="", client_key="c")
    finally:
        e.close()
    assert a.decision is b.decision is Decision.DENY and not a.retryable and not b.retryable
    assert e.seen.requests == []  # nothing was sent
    assert "stored_hash must be str" in caplog.text and "password must be str or bytes" in caplog.text
    assert PASSWORD not in caplog.text and "12345" not in caplog.text


@pytest.mark.asyncio
async def test_a_str_that_is_not_utf8_is_a_deny_not_an_exception(caplog) -> None:
    """A lone surrogate cannot be encoded: protobuf would raise UnicodeEncodeError while
    the request is built; the client denies without sending, naming the field."""
    caplog.set_level(logging.WARNING)
    e = AnswerEndpoint(answer=dict(verdict=1, decision=1))
    bad = "mallory\ud800@example.com"
    try:
        with client(e.url) as c:
            sync = c.verify(realm="default", identifier=bad, password=PASSWORD, stored_hash="", client_key="c")
            flow = c.password_reset_request("default", bad, client_key="c")
        async with AsyncClient(ClientConfig(endpoints=(e.url,), call_timeout=1.0)) as ac:
            aio = await ac.admit("default", bad)
            check = await ac.check_password("default", "a@example.com", "pw\udfff")
    finally:
        e.close()
    assert [x.decision for x in (sync, flow, aio)] == [Decision.DENY] * 3
    assert not any(x.retryable for x in (sync, flow, aio))
    assert check.result is PasswordCheckResult.UNCHECKED and not check.retryable
    assert e.seen.requests == []
    assert "identifier is not encodable as UTF-8" in caplog.text
    assert "password is not encodable as UTF-8" in caplog.text
    assert "mallory" not in caplog.text


@pytest.mark.parametrize("endpoint", ["closed", "status", "reset", "garbage", "bad input"])
@pytest.mark.asyncio
async def test_no_password_in_any_repr_log_or_error(endpoint: str, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    secret = "pw-\N{SNOWMAN}-9f8e7d6c5b4a-never-printed"
    ep = {"closed": ClosedPort, "status": lambda: AnswerEndpoint(status=13), "reset": lambda: RawEndpoint("reset", "Verify"), "garbage": lambda: RawEndpoint("garbage", "Verify"), "bad input": lambda: AnswerEndpoint(answer={})}[endpoint]()
    extra = {"stored_hash": None} if endpoint == "bad input" else {}
    seen: list[str] = []
    try:
        for make in (Client, AsyncClient):
            c = make(ClientConfig(endpoints=(ep.url,), call_timeout=1.0))
            login = dict(realm="default", identifier="a@example.com", password=secret, stored_hash="", client_key="c")
            login.update(extra)
            if make is Client:
                a = c.verify(**login)
                check = c.check_password("default", "a@example.com", secret)
                c.close()
            else:
                a = await c.verify(**login)
                check = await c.check_password("default", "a@example.com", secret)
                await c.close()
            assert a.decision is Decision.DENY
            seen += [repr(a), str(a), repr(check), repr(c), repr(c.stats())]
    finally:
        ep.close()
    seen.append(caplog.text)
    for text in seen:
        assert secret not in text
        assert secret.encode("utf-8").hex() not in text


def test_configuration_errors_name_the_setting() -> None:
    for bad, setting in [
        (dict(endpoints=()), "endpoints"),
        (dict(endpoints=("127.0.0.1:50051",)), "endpoints[0]"),
        (dict(endpoints=("ftp://x:1",)), "endpoints[0]"),
        (dict(endpoints=("https://x:1",)), "tls"),
        (dict(call_timeout=0), "call_timeout"),
        (dict(max_retries=11), "max_retries"),
        (dict(retry_budget_ratio=1.5), "retry_budget_ratio"),
        (dict(eject_after=0), "eject_after"),
        (dict(eject_for=10.0, eject_max=1.0), "eject_max"),
    ]:
        with pytest.raises(ConfigError, match=setting.replace("[", r"\[").replace("]", r"\]")):
            ClientConfig(**bad)


def test_the_bearer_token_is_sent_and_never_printed(tmp_path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("s3cr3t-token\n")
    e = AnswerEndpoint(answer=dict(decision=1))
    try:
        with Client(ClientConfig(endpoints=(e.url,), token_file=str(token_file))) as c:
            call_sync(c, "Admit")
            assert "s3cr3t-token" not in repr(c)
    finally:
        e.close()
    assert e.seen.requests[0][2]["authorization"] == "Bearer s3cr3t-token"
