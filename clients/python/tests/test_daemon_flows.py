"""The flows around the login and the step-up for unknown devices against the real
daemon binary (PORTCULLIS_BINARY, or the repository's target/debug/portcullis), on the
embedded store in a tmp dir, with two realms: ``default`` (the flows' defaults: five
one-time codes in 15 minutes, one reset mail a minute) and ``stepup``
(``unknown_device = "step_up"``)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from calls import ARGON2, PASSWORD
from daemon import Daemon
from portcullis_client import AnswerKind, AsyncClient, ChallengeReason, Client, ClientConfig, Decision, Flow

# The store's operation timeout is raised from 500 ms: on a loaded CI machine one slow
# write of the embedded store would otherwise answer UNAVAILABLE (a retryable deny).
CONFIG = """shutdown_delay = "0s"
[store]
operation_timeout = "5s"
[realms.default]
[realms.stepup]
unknown_device = "step_up"
"""
#: One-time codes the default realm allows in a window (the sixth is denied).
CODES = 5


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("flows") / "data", CONFIG)
    yield d
    d.stop()


def identifier(what: str) -> str:
    return f"{what}-{uuid.uuid4().hex[:8]}@example.com"


def config(daemon: Daemon) -> ClientConfig:
    return ClientConfig(endpoints=(daemon.url,), call_timeout=5.0)


def test_second_factor_codes_are_shared_by_two_clients_and_the_sixth_is_denied(daemon: Daemon) -> None:
    who = identifier("otp")

    async def run() -> tuple[list, list]:
        # One sync and one asyncio client: two gateways, one account's five codes.
        async with AsyncClient(config(daemon)) as b:
            with Client(config(daemon)) as a:
                first = []
                for i in range(CODES):
                    if i % 2 == 0:
                        first.append(a.second_factor_attempt("default", who))
                    else:
                        first.append(await b.second_factor_attempt("default", who))
                sixth = [a.second_factor_attempt("default", who), await b.second_factor_attempt("default", who)]
                return first, sixth

    first, sixth = asyncio.run(run())
    assert [x.decision for x in first] == [Decision.ALLOW] * CODES
    assert [(x.decision, x.kind, x.retryable) for x in sixth] == [(Decision.DENY, AnswerKind.DENY, False)] * 2
    assert daemon.inspect("default", who, flow=Flow.SECOND_FACTOR.value).door == 2  # DOOR_STATE_CLOSED
    with Client(config(daemon)) as c:
        # The flow's record is its own: the login throttle and the recovery codes are untouched.
        assert c.admit("default", who).decision is Decision.ALLOW
        assert c.recovery_code_attempt("default", who).decision is Decision.ALLOW
        # A verified code clears the flow.
        assert c.clear_flow("default", who, Flow.SECOND_FACTOR).decision is Decision.ALLOW
        assert c.second_factor_attempt("default", who).decision is Decision.ALLOW


def test_a_retried_code_is_counted_once(daemon: Daemon) -> None:
    who = identifier("otp-dedup")
    with Client(config(daemon)) as c:
        # Three calls with one attempt_id (a retry's) and four fresh ones spend the five codes.
        same = [c.second_factor_attempt("default", who, attempt_id="the-same-code") for _ in range(3)]
        fresh = [c.second_factor_attempt("default", who) for _ in range(CODES - 1)]
        last = c.second_factor_attempt("default", who)
    assert all(x.decision is Decision.ALLOW for x in same + fresh)
    assert last.decision is Decision.DENY


def test_a_second_reset_mail_inside_the_interval_is_denied(daemon: Daemon) -> None:
    who = identifier("reset")
    with Client(config(daemon)) as c:
        assert c.password_reset_request("default", who, client_key="198.51.100.20").decision is Decision.ALLOW
        second = c.password_reset_request("default", who, client_key="198.51.100.21")
        assert (second.decision, second.retryable) == (Decision.DENY, False)
        # The verification mail keeps a record of its own.
        assert c.verification_resend_request("default", who, client_key="198.51.100.20").decision is Decision.ALLOW
        # A mail flow needs a client key (INVALID_ARGUMENT), and no gateway call clears
        # its caps (INVALID_ARGUMENT): denies.
        no_key = c.record_flow_attempt("default", identifier("reset-no-key"), Flow.PASSWORD_RESET)
        assert (no_key.decision, no_key.retryable) == (Decision.DENY, False)
        assert c.clear_flow("default", who, Flow.PASSWORD_RESET).decision is Decision.DENY
        assert c.password_reset_request("default", who, client_key="198.51.100.20").decision is Decision.DENY


@pytest.mark.parametrize("kind", ["sync", "asyncio"])
def test_step_up_a_challenge_confirmed_gives_the_device_token_the_next_login_is_allowed_with(daemon: Daemon, kind: str) -> None:
    who = identifier(f"stepup-{kind}")
    login = dict(realm="stepup", identifier=who, password=PASSWORD, stored_hash=ARGON2, client_key="203.0.113.30")

    def steps(c):
        """The gateway's calls, in order: yields each call's coroutine or answer."""
        challenged = yield c.verify(**login)
        yield c.verify(**dict(login, password="not the password"))
        yield c.confirm_device(realm="stepup", identifier=who, challenge_token="A" * 60, stored_hash=ARGON2)
        yield c.confirm_device(realm="stepup", identifier=identifier("else"), challenge_token=challenged.challenge_token, stored_hash=ARGON2)
        confirmed = yield c.confirm_device(realm="stepup", identifier=who, challenge_token=challenged.challenge_token, stored_hash=ARGON2)
        yield c.verify(**login, device_token=confirmed.device_token)
        yield c.verify(**login)
        yield c.verify(**dict(login, realm="default"))

    answers = []
    if kind == "sync":
        with Client(config(daemon)) as c:
            gen = steps(c)
            answer = next(gen)
            while True:
                answers.append(answer)
                try:
                    answer = gen.send(answer)
                except StopIteration:
                    break
    else:

        async def run() -> None:
            async with AsyncClient(config(daemon)) as c:
                gen = steps(c)
                pending = next(gen)
                while True:
                    answer = await pending
                    answers.append(answer)
                    try:
                        pending = gen.send(answer)
                    except StopIteration:
                        break

        asyncio.run(run())

    challenged, wrong, forged, elsewhere, confirmed, known, again, default_realm = answers
    # The right password from an unknown device: a challenge, never an allow.
    assert (challenged.decision, challenged.kind, challenged.allowed) == (Decision.DENY, AnswerKind.CHALLENGE, False)
    assert challenged.challenge_reason is ChallengeReason.NEW_DEVICE
    assert challenged.device_token is None and challenged.challenge_token
    # A wrong password is a plain deny.
    assert (wrong.kind, wrong.challenge_token) == (AnswerKind.DENY, None)
    # A token that is not this challenge's, or another account's: FAILED_PRECONDITION.
    for refused in (forged, elsewhere):
        assert (refused.decision, refused.retryable, refused.device_token) == (Decision.DENY, False, None)
    # The gateway's second factor passed: the challenge token becomes a device token ...
    assert confirmed.decision is Decision.ALLOW and confirmed.device_token
    # ... with which the next login is allowed.
    assert (known.decision, known.kind, known.allowed) == (Decision.ALLOW, AnswerKind.ALLOW, True)
    assert known.challenge_token is None and known.device_token
    # Without it, the same password is challenged again; the default realm accepts it.
    assert again.kind is AnswerKind.CHALLENGE
    assert default_realm.kind is AnswerKind.ALLOW
