"""Beyond the table, for the flows and the step-up: a challenge and a required change
are denies of their own kind with nothing of an accept, the challenge token is never
printed, each flow call sends its flow, client key and attempt_id, and a flow the
client does not know is a deny without a call."""

from __future__ import annotations

import pytest

from calls import ARGON2, PASSWORD
from faults import AnswerEndpoint
from portcullis_client import (
    Answer,
    AnswerKind,
    AsyncClient,
    ChallengeReason,
    Client,
    ClientConfig,
    ClearReason,
    Decision,
    Flow,
)

SIGNALS = dict(
    needs_rehash=True,
    device_token="dt-must-not-pass",
    spray_suspected=True,
    step_up=True,
    network_throttled=True,
    password_breached=True,
)
LOGIN = dict(realm="default", identifier="alice@example.com", password=PASSWORD, stored_hash=ARGON2, client_key="203.0.113.7")


def config(url: str) -> ClientConfig:
    return ClientConfig(endpoints=(url,), call_timeout=1.0)


def verify_answer(answer: dict) -> Answer:
    e = AnswerEndpoint(answer=answer)
    try:
        with Client(config(e.url)) as c:
            return c.verify(**LOGIN)
    finally:
        e.close()


def test_a_challenge_is_a_deny_of_its_own_kind_with_the_token_and_no_device_token() -> None:
    a = verify_answer(dict(verdict=3, challenge_reason=1, challenge_token="ct-secret-1", **SIGNALS))
    assert (a.decision, a.kind, a.allowed, a.is_allowed(), a.retryable) == (Decision.DENY, AnswerKind.CHALLENGE, False, False, False)
    assert (a.challenge_token, a.challenge_reason) == ("ct-secret-1", ChallengeReason.NEW_DEVICE)
    # The advice and password_breached (ask for the change after the challenge); never a
    # device token or needs_rehash.
    assert (a.device_token, a.needs_rehash) == (None, False)
    assert (a.spray_suspected, a.step_up, a.network_throttled, a.password_breached) == (True, True, True, True)
    assert "ct-secret-1" not in repr(a) and "ct-secret-1" not in str(a)
    with pytest.raises(TypeError):
        bool(a)


def test_a_challenge_reason_the_client_does_not_know_is_still_a_challenge() -> None:
    a = verify_answer(dict(verdict=3, challenge_reason=9, challenge_token="ct-2"))
    assert (a.kind, a.challenge_reason, a.allowed) == (AnswerKind.CHALLENGE, ChallengeReason.UNKNOWN, False)


def test_a_challenge_without_a_token_is_a_plain_deny() -> None:
    a = verify_answer(dict(verdict=3, challenge_reason=1, password_breached=True))
    assert (a.decision, a.kind, a.challenge_token, a.challenge_reason, a.password_breached) == (
        Decision.DENY, AnswerKind.DENY, None, None, False,
    )


def test_a_required_change_is_a_deny_of_its_own_kind_with_nothing_of_an_accept() -> None:
    a = verify_answer(dict(verdict=4, **SIGNALS))
    assert (a.decision, a.kind, a.allowed) == (Decision.DENY, AnswerKind.CHANGE_REQUIRED, False)
    assert (a.device_token, a.needs_rehash, a.challenge_token, a.challenge_reason) == (None, False, None, None)
    assert a.password_breached is True


def test_an_answer_cannot_be_built_that_mixes_an_allow_with_a_deny() -> None:
    with pytest.raises(ValueError):
        Answer(Decision.ALLOW, kind=AnswerKind.CHALLENGE, challenge_token="t", challenge_reason=ChallengeReason.NEW_DEVICE)
    with pytest.raises(ValueError):
        Answer(Decision.DENY, kind=AnswerKind.ALLOW)
    with pytest.raises(ValueError):
        Answer(Decision.DENY, kind=AnswerKind.CHANGE_REQUIRED, device_token="dt")
    with pytest.raises(ValueError):
        Answer(Decision.DENY, kind=AnswerKind.CHALLENGE, challenge_reason=ChallengeReason.NEW_DEVICE)
    assert Answer.allow().kind is AnswerKind.ALLOW and Answer.deny(True).kind is AnswerKind.DENY


def test_the_flow_calls_send_their_flow_client_key_and_one_attempt_id() -> None:
    e = AnswerEndpoint(answer={})
    try:
        with Client(config(e.url)) as c:
            # An empty answer is DECISION_UNSPECIFIED for a flow call: a deny.
            assert c.second_factor_attempt("default", "u@example.com", attempt_id="otp-1").decision is Decision.DENY
            c.recovery_code_attempt("default", "u@example.com")
            c.password_reset_request("default", "u@example.com", client_key="198.51.100.4")
            c.verification_resend_request("default", "u@example.com", client_key="198.51.100.5", attempt_id="mail-1")
            c.record_flow_attempt("default", "u@example.com", Flow.PASSWORD_RESET, client_key="198.51.100.6")
            assert c.clear_flow("default", "u@example.com", Flow.RECOVERY_CODE).decision is Decision.ALLOW
            # An OK ConfirmDevice without a device token confirms nothing.
            confirmed = c.confirm_device(realm="default", identifier="u@example.com", challenge_token="ct", stored_hash=ARGON2)
            assert (confirmed.decision, confirmed.device_token) == (Decision.DENY, None)
    finally:
        e.close()
    assert [m for m, _, _ in e.seen.requests] == ["RecordFlowAttempt"] * 5 + ["ClearFlow", "ConfirmDevice"]
    assert e.seen.flows == [1, 2, 3, 4, 3, 2]
    ids = [a for _, a, _ in e.seen.requests[:5]]
    assert ids[0] == "otp-1" and ids[3] == "mail-1"
    assert len({ids[1], ids[2], ids[4]}) == 3, "a fresh attempt_id per logical call"


@pytest.mark.asyncio
async def test_the_asyncio_client_has_the_same_flow_calls() -> None:
    e = AnswerEndpoint(answer=dict(decision=1, device_token="dt-confirmed"))
    try:
        async with AsyncClient(config(e.url)) as c:
            answers = [
                await c.second_factor_attempt("default", "u@example.com"),
                await c.recovery_code_attempt("default", "u@example.com"),
                await c.password_reset_request("default", "u@example.com", client_key="198.51.100.4"),
                await c.verification_resend_request("default", "u@example.com", client_key="198.51.100.5"),
                await c.record_flow_attempt("default", "u@example.com", Flow.SECOND_FACTOR),
                await c.clear_flow("default", "u@example.com", Flow.SECOND_FACTOR),
            ]
            confirmed = await c.confirm_device(realm="default", identifier="u@example.com", challenge_token="ct", stored_hash=ARGON2)
    finally:
        e.close()
    assert all(a.decision is Decision.ALLOW for a in answers)
    assert (confirmed.decision, confirmed.device_token) == (Decision.ALLOW, "dt-confirmed")
    assert "dt-confirmed" not in repr(confirmed)
    assert e.seen.flows == [1, 2, 3, 4, 1, 1]


@pytest.mark.parametrize("bad", ["second_factor", 1, None, ClearReason.PASSWORD_VERIFIED])
def test_a_flow_that_is_not_a_flow_is_a_deny_without_a_call(bad) -> None:
    e = AnswerEndpoint(answer=dict(decision=1))
    try:
        with Client(config(e.url)) as c:
            a = c.record_flow_attempt("default", "u@example.com", bad)
            b = c.clear_flow("default", "u@example.com", bad)
            d = c.confirm_device(realm="default", identifier="u@example.com", challenge_token=None, stored_hash=ARGON2)
    finally:
        e.close()
    assert a.decision is b.decision is d.decision is Decision.DENY
    assert not (a.retryable or b.retryable or d.retryable)
    assert e.seen.requests == []


def test_mail_flows_are_told_apart() -> None:
    assert [f for f in Flow if f.is_mail] == [Flow.PASSWORD_RESET, Flow.VERIFICATION_RESEND]
    assert [f.value for f in Flow] == [1, 2, 3, 4]
