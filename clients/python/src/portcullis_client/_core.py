"""What the sync and the asyncio client share: input checks, the requests, routing
keys, counters, the deadline and retry decisions, and how each answer becomes an
:class:`Answer`."""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeVar

from . import _config
from ._answer import (
    Advice,
    Answer,
    ChallengeReason,
    ClearReason,
    Decision,
    Failed,
    Failure,
    Flow,
    PasswordCheck,
    PasswordCheckResult,
    failure_answer,
    failure_is_retryable,
)
from ._config import ClientConfig
from ._pb import governor_pb2 as pb
from ._pool import HealthPolicy, Pool, RetryBudget
from ._process import Lock
from ._tls import TlsDiagnosis

log = logging.getLogger("portcullis_client")

METHODS = (
    "Admit",
    "RecordAttempt",
    "Verify",
    "ClearAttempts",
    "CheckPassword",
    "RecordFlowAttempt",
    "ClearFlow",
    "ConfirmDevice",
)


class BadInput(Exception):
    """The gateway passed something the call cannot carry. The message names the field
    and the type, never the value. Turned into a deny, not raised to the caller."""


@dataclass(frozen=True)
class ClientStats:
    """Counters for tests and dashboards."""

    #: Logical calls made.
    calls: int
    #: Retries after transport failures.
    retries: int
    #: Tries that ended in a transport failure or timeout.
    transport_failures: int
    #: Calls denied by the open breaker without a network call.
    breaker_denials: int
    #: Whether the breaker is open now.
    breaker_open: bool
    #: Health of each endpoint, in configuration order.
    healthy: list[bool]


T = TypeVar("T")
P = ParamSpec("P")


def text(field: str, value: object, *, optional: bool = False) -> str:
    """A string field: ``str`` that encodes as UTF-8 (``None`` is ``""`` when
    ``optional``). Raises :class:`BadInput` naming ``field``."""
    if value is None and optional:
        return ""
    if not isinstance(value, str):
        raise BadInput(f"{field} must be str, not {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadInput(f"{field} is not encodable as UTF-8") from None
    return value


def secret(field: str, value: object) -> bytes:
    """A password as bytes (str is sent as UTF-8)."""
    if isinstance(value, str):
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError:
            raise BadInput(f"{field} is not encodable as UTF-8") from None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise BadInput(f"{field} must be str or bytes, not {type(value).__name__}")


def new_attempt_id() -> str:
    """A fresh attempt id (a uuid4), made once per logical call."""
    return str(uuid.uuid4())


def account(realm: object, identifier: object) -> pb.Account:
    """The request's ``account``; raises :class:`BadInput` naming the field."""
    return pb.Account(realm=text("realm", realm), identifier=text("identifier", identifier))


def route_key(realm: str, identifier: str) -> str:
    """Non-Verify calls are spread by account, as the Rust client spreads them."""
    return f"{len(realm.encode('utf-8'))}\0{realm}\0{identifier}"


class Core:
    """Configuration, pool, budget and counters of one client."""

    def __init__(self, config: ClientConfig | None) -> None:
        config = ClientConfig() if config is None else config
        if not isinstance(config, ClientConfig):
            raise TypeError("config must be a ClientConfig")
        config.validate()
        self.config = config
        self.targets = _config.channel_targets(config)
        self.options = _config.channel_options(config)
        self.credentials = _config.channel_credentials(config)
        self.auth_metadata = _config.bearer_metadata(config)
        policy = HealthPolicy(
            eject_after=config.eject_after,
            eject_for=config.eject_for,
            eject_max=config.eject_max,
            probe_timeout=config.connect_timeout + config.call_timeout,
        )
        self.pool = Pool(list(config.endpoints), policy)
        self.budget = RetryBudget(config.retry_budget_ratio, config.retry_budget_reserve)
        self.tls = TlsDiagnosis(list(config.endpoints), config.tls, config.connect_timeout)
        self._lock = Lock()
        self._calls = self._retries = self._transport_failures = self._breaker_denials = 0

    # counters -----------------------------------------------------------------
    def count(self, name: str) -> None:
        """Adds one to the counter ``name``."""
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)

    def stats(self) -> ClientStats:
        """The counters now, and the pool's health."""
        with self._lock:
            calls, retries = self._calls, self._retries
            failures, denials = self._transport_failures, self._breaker_denials
        return ClientStats(calls, retries, failures, denials, self.pool.breaker_open(), self.pool.healthy())

    def route(self, client_key: str) -> str | None:
        """The endpoint a ``verify`` for ``client_key`` would go to now."""
        return self.pool.route(client_key)

    # one try's outcome ----------------------------------------------------------
    def start_call(self) -> None:
        """A logical call begins: counted, and the retry budget earns its share."""
        self.count("_calls")
        self.budget.deposit()

    def deadline(self) -> float:
        """The monotonic time by which the whole call (retries included) must end."""
        return time.monotonic() + self.config.call_timeout

    @staticmethod
    def time_left(deadline: float) -> float:
        """Seconds left before ``deadline`` (zero or less when it passed)."""
        return deadline - time.monotonic()

    def no_endpoint(self, call: Call[T]) -> T:
        """No endpoint can take a call that tried none: the breaker denies it. (A call
        that tried some ends with its last try's failure.)"""
        self.breaker_denial()
        return call.on_failure(Failed(Failure.BREAKER_OPEN))

    def answered(self, pick: int) -> None:
        """Endpoint ``pick`` answered (anything at all): healthy, and no TLS failure to explain."""
        self.pool.answered(pick)
        self.tls.answered(pick)

    def retry_after(self, call: Call[T], pick: int, failed: Failed, tries: int, deadline: float) -> bool:
        """After a failed try on endpoint ``pick``: records it (an answered status is
        health, anything else a transport failure) and says whether to try again."""
        if failed.kind is Failure.ANSWERED:
            self.answered(pick)
            return False
        self.transport_failure(pick, call.method, failed)
        return self.may_retry(failed, tries, self.time_left(deadline))

    def transport_failure(self, pick: int, method: str, failed: Failed) -> None:
        """Counts a transport failure against endpoint ``pick`` (logged at debug, with
        the endpoint and the kind only)."""
        self.count("_transport_failures")
        ejected = self.pool.failed(pick)
        log.debug(
            "portcullis: %s to %s: %s%s",
            method,
            self.pool.urls[pick],
            failed.kind.value,
            " (endpoint ejected)" if ejected else "",
        )

    def may_retry(self, failed: Failed, tries: int, time_left: float) -> bool:
        """A transport failure is retried within ``max_retries``, the time left and the
        retry budget; nothing else is."""
        retry = (
            failed.kind is Failure.TRANSPORT
            and tries <= self.config.max_retries
            and time_left > 0
            and self.budget.withdraw()
        )
        if retry:
            self.count("_retries")
        return retry

    def breaker_denial(self) -> None:
        """Counts a call the open breaker denied."""
        self.count("_breaker_denials")

    def metadata(self, trace: list[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
        """Each try's metadata: the trace context, then the bearer token."""
        return tuple(trace) + self.auth_metadata


@dataclass
class Call(Generic[T]):
    """One logical call: the method, the request (built once, so every try carries the
    same attempt_id), how it is routed, and how its answer reads. A call whose input was
    bad carries ``bad_input`` (the field and the type, never the value) and is not sent."""

    method: str
    request: Any
    route: str
    interpret: Callable[[Any], T]
    on_failure: Callable[[Failed], T]
    bad_input: str | None = None

    def __repr__(self) -> str:  # the request may hold a password
        return f"Call(method={self.method!r})"


def _unsent(_response: Any) -> Any:
    raise AssertionError("a call with bad input is never sent")


def guarded(method: str, on_failure: Callable[[Failed], T]) -> Callable[[Callable[P, Call[T]]], Callable[P, Call[T]]]:
    """Makes a call builder total: bad input (:class:`BadInput`) or any other error while
    the request is built gives a call that is not sent and answers ``on_failure``."""

    def wrap(build: Callable[P, Call[T]]) -> Callable[P, Call[T]]:
        @functools.wraps(build)
        def checked(*args: P.args, **kwargs: P.kwargs) -> Call[T]:
            try:
                return build(*args, **kwargs)
            except BadInput as e:
                reason = str(e)
            except Exception as e:  # noqa: BLE001 - the message could quote a value
                reason = f"the request could not be built ({type(e).__name__})"
            return Call(method, None, "", _unsent, on_failure, bad_input=reason)

        return checked

    return wrap


def refuse_bad_input(call: Call[T]) -> T:
    """The answer to a call whose input was bad: a deny (or an unchecked password) that
    is not retryable, and a warning naming the field."""
    log.warning("portcullis: %s not sent, denied: %s", call.method, call.bad_input)
    return call.on_failure(Failed(Failure.LOCAL))


def decision_answer(decision: int) -> Answer:
    """DECISION_ALLOW is the only allow; DENY, UNSPECIFIED and unknown values deny."""
    return Answer.allow() if decision == pb.DECISION_ALLOW else Answer.deny(False)


@guarded("Admit", failure_answer)
def admit_call(realm: object, identifier: object) -> Call[Answer]:
    acct = account(realm, identifier)
    return Call(
        "Admit",
        pb.AdmitRequest(account=acct),
        route_key(acct.realm, acct.identifier),
        lambda r: decision_answer(r.decision),
        failure_answer,
    )


@guarded("RecordAttempt", failure_answer)
def record_attempt_call(realm: object, identifier: object, client_key: object, attempt_id: object) -> Call[Answer]:
    acct = account(realm, identifier)
    req = pb.RecordAttemptRequest(
        account=acct,
        attempt_id=text("attempt_id", attempt_id, optional=True) or new_attempt_id(),
        client_key=text("client_key", client_key, optional=True),
    )

    def interpret(r: pb.RecordAttemptResponse) -> Answer:
        base = decision_answer(r.decision)
        return Answer(
            base.decision,
            retryable=False,
            step_up=bool(r.step_up),
            network_throttled=bool(r.network_throttled),
            lockout_started=bool(r.lockout_started),
            ceiling_reached=bool(r.ceiling_reached),
        )

    return Call("RecordAttempt", req, route_key(acct.realm, acct.identifier), interpret, failure_answer)


@guarded("Verify", failure_answer)
def verify_call(
    realm: object,
    identifier: object,
    password: object,
    stored_hash: object,
    client_key: object,
    attempt_id: object,
    device_token: object,
) -> Call[Answer]:
    acct = account(realm, identifier)
    key = text("client_key", client_key)
    req = pb.VerifyRequest(
        account=acct,
        password=secret("password", password),
        stored_hash=text("stored_hash", stored_hash),
        client_key=key,
        attempt_id=text("attempt_id", attempt_id, optional=True) or new_attempt_id(),
        device_token=text("device_token", device_token, optional=True),
    )

    def interpret(r: pb.VerifyResponse) -> Answer:
        advice: Advice = {
            "spray_suspected": bool(r.spray_suspected),
            "step_up": bool(r.step_up),
            "network_throttled": bool(r.network_throttled),
        }
        if r.verdict == pb.VERDICT_ACCEPT:
            return Answer(
                Decision.ALLOW,
                needs_rehash=bool(r.needs_rehash),
                device_token=r.device_token or None,
                password_breached=bool(r.password_breached),
                **advice,
            )
        if r.verdict == pb.VERDICT_CHALLENGE:
            # A deny of its own kind, with the challenge token and never a device token
            # (whatever the answer held); without a token, a plain deny.
            reason = (
                ChallengeReason.NEW_DEVICE
                if r.challenge_reason == pb.CHALLENGE_REASON_NEW_DEVICE
                else ChallengeReason.UNKNOWN
            )
            return Answer.challenge(
                r.challenge_token,
                reason,
                password_breached=bool(r.password_breached),
                ceiling_reached=bool(r.ceiling_reached),
                **advice,
            )
        if r.verdict == pb.VERDICT_CHANGE_REQUIRED:
            return Answer.change_required(password_breached=bool(r.password_breached), **advice)
        # REJECT, UNSPECIFIED and any verdict this client does not know: a deny.
        return Answer(
            Decision.DENY,
            lockout_started=bool(r.lockout_started),
            ceiling_reached=bool(r.ceiling_reached),
            **advice,
        )

    # Verify is routed by the client key, so one end client's calls meet one daemon's
    # per-client CPU ceiling.
    return Call("Verify", req, key, interpret, failure_answer)


@guarded("ClearAttempts", failure_answer)
def clear_attempts_call(realm: object, identifier: object, reason: object, client_key: object) -> Call[Answer]:
    acct = account(realm, identifier)
    if not isinstance(reason, ClearReason):
        raise BadInput(f"reason must be ClearReason, not {type(reason).__name__}")
    req = pb.ClearAttemptsRequest(
        account=acct, reason=_CLEAR_REASONS[reason], client_key=text("client_key", client_key, optional=True)
    )
    return Call(
        "ClearAttempts",
        req,
        route_key(acct.realm, acct.identifier),
        lambda _r: Answer.allow(),
        failure_answer,
    )


@guarded("ConfirmDevice", failure_answer)
def confirm_device_call(
    realm: object, identifier: object, challenge_token: object, stored_hash: object
) -> Call[Answer]:
    acct = account(realm, identifier)
    req = pb.ConfirmDeviceRequest(
        account=acct,
        challenge_token=text("challenge_token", challenge_token),
        stored_hash=text("stored_hash", stored_hash),
    )

    def interpret(r: pb.ConfirmDeviceResponse) -> Answer:
        # An OK answer without a device token confirms nothing.
        if not r.device_token:
            return Answer.deny(False)
        return Answer(Decision.ALLOW, device_token=r.device_token)

    return Call("ConfirmDevice", req, route_key(acct.realm, acct.identifier), interpret, failure_answer)


_FLOWS: dict[Flow, pb.Flow] = {
    Flow.SECOND_FACTOR: pb.FLOW_SECOND_FACTOR,
    Flow.RECOVERY_CODE: pb.FLOW_RECOVERY_CODE,
    Flow.PASSWORD_RESET: pb.FLOW_PASSWORD_RESET,
    Flow.VERIFICATION_RESEND: pb.FLOW_VERIFICATION_RESEND,
}
_CLEAR_REASONS: dict[ClearReason, pb.ClearReason] = {
    ClearReason.PASSWORD_VERIFIED: pb.CLEAR_REASON_PASSWORD_VERIFIED,
    ClearReason.PASSWORD_RESET_COMPLETED: pb.CLEAR_REASON_PASSWORD_RESET_COMPLETED,
}


def flow(value: object) -> Flow:
    """``value`` as a :class:`Flow`; raises :class:`BadInput` for anything else."""
    if not isinstance(value, Flow):
        raise BadInput(f"flow must be Flow, not {type(value).__name__}")
    return value


@guarded("RecordFlowAttempt", failure_answer)
def record_flow_attempt_call(
    realm: object, identifier: object, which: object, client_key: object, attempt_id: object
) -> Call[Answer]:
    acct = account(realm, identifier)
    req = pb.RecordFlowAttemptRequest(
        account=acct,
        flow=_FLOWS[flow(which)],
        client_key=text("client_key", client_key, optional=True),
        attempt_id=text("attempt_id", attempt_id, optional=True) or new_attempt_id(),
    )

    def interpret(r: pb.RecordFlowAttemptResponse) -> Answer:
        return Answer(
            decision_answer(r.decision).decision,
            lockout_started=bool(r.lockout_started),
            ceiling_reached=bool(r.ceiling_reached),
        )

    return Call("RecordFlowAttempt", req, route_key(acct.realm, acct.identifier), interpret, failure_answer)


@guarded("ClearFlow", failure_answer)
def clear_flow_call(realm: object, identifier: object, which: object) -> Call[Answer]:
    acct = account(realm, identifier)
    req = pb.ClearFlowRequest(account=acct, flow=_FLOWS[flow(which)])
    return Call("ClearFlow", req, route_key(acct.realm, acct.identifier), lambda _r: Answer.allow(), failure_answer)


def check_password_failure(failed: Failed) -> PasswordCheck:
    """A ``check_password`` that got no answer: unchecked, so refused."""
    return PasswordCheck(
        PasswordCheckResult.UNCHECKED, retryable=failure_is_retryable(failed), failure_reason=failed.reason
    )


@guarded("CheckPassword", check_password_failure)
def check_password_call(realm: object, identifier: object, password: object) -> Call[PasswordCheck]:
    acct = account(realm, identifier)
    req = pb.CheckPasswordRequest(account=acct, password=secret("password", password))

    def interpret(r: pb.CheckPasswordResponse) -> PasswordCheck:
        found = {
            pb.PASSWORD_CHECK_REASON_OK: PasswordCheckResult.ACCEPTABLE,
            pb.PASSWORD_CHECK_REASON_BREACHED: PasswordCheckResult.BREACHED,
            pb.PASSWORD_CHECK_REASON_CONTEXT_WORD: PasswordCheckResult.CONTEXT_WORD,
        }.get(r.reason, PasswordCheckResult.UNCHECKED)
        return PasswordCheck(found)

    return Call("CheckPassword", req, route_key(acct.realm, acct.identifier), interpret, check_password_failure)


def local_error(call: Call[T], error: BaseException) -> T:
    """An error of this process while calling (not the daemon's): a deny. Only the
    exception's type is logged: its text could quote what was sent."""
    log.error("portcullis: %s failed locally (%s), denied", call.method, type(error).__name__)
    return call.on_failure(Failed(Failure.LOCAL))
