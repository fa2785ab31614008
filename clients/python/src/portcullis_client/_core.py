"""What the sync and the asyncio client share: input checks, the requests, routing
keys, counters, and how each answer becomes an :class:`Answer`."""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from . import _config
from ._answer import (
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


def text(field: str, value: object, *, optional: bool = False) -> str:
    if value is None and optional:
        return ""
    if not isinstance(value, str):
        raise BadInput(f"{field} must be str, not {type(value).__name__}")
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
    return str(uuid.uuid4())


def account(realm: object, identifier: object) -> pb.Account:
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
        self._lock = threading.Lock()
        self._calls = self._retries = self._transport_failures = self._breaker_denials = 0

    # counters -----------------------------------------------------------------
    def count(self, name: str) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)

    def stats(self) -> ClientStats:
        with self._lock:
            calls, retries = self._calls, self._retries
            failures, denials = self._transport_failures, self._breaker_denials
        return ClientStats(calls, retries, failures, denials, self.pool.breaker_open(), self.pool.healthy())

    def route(self, client_key: str) -> str | None:
        return self.pool.route(client_key)

    # one try's outcome ----------------------------------------------------------
    def start_call(self) -> None:
        self.count("_calls")
        self.budget.deposit()

    def transport_failure(self, pick: int, method: str, failed: Failed) -> None:
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
        self.count("_breaker_denials")

    def metadata(self, trace: list[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
        return tuple(trace) + self.auth_metadata


@dataclass
class Call:
    """One logical call: the method, the request (built once, so every try carries the
    same attempt_id), how it is routed, and how its answer reads."""

    method: str
    request: Any
    route: str
    interpret: Callable[[Any], Any]
    on_failure: Callable[[Failed], Any]

    def __repr__(self) -> str:  # the request may hold a password
        return f"Call(method={self.method!r})"


def deny_bad_input(method: str, error: BadInput) -> Answer:
    log.warning("portcullis: %s not sent, denied: %s", method, error)
    return Answer.deny(False)


def decision_answer(decision: int) -> Answer:
    """DECISION_ALLOW is the only allow; DENY, UNSPECIFIED and unknown values deny."""
    return Answer.allow() if decision == pb.DECISION_ALLOW else Answer.deny(False)


def admit_call(realm: object, identifier: object) -> Call:
    acct = account(realm, identifier)
    return Call(
        "Admit",
        pb.AdmitRequest(account=acct),
        route_key(acct.realm, acct.identifier),
        lambda r: decision_answer(r.decision),
        failure_answer,
    )


def record_attempt_call(realm: object, identifier: object, client_key: object, attempt_id: object) -> Call:
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
        )

    return Call("RecordAttempt", req, route_key(acct.realm, acct.identifier), interpret, failure_answer)


def verify_call(
    realm: object,
    identifier: object,
    password: object,
    stored_hash: object,
    client_key: object,
    attempt_id: object,
    device_token: object,
) -> Call:
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
        advice = dict(
            spray_suspected=bool(r.spray_suspected),
            step_up=bool(r.step_up),
            network_throttled=bool(r.network_throttled),
        )
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
            return Answer.challenge(r.challenge_token, reason, password_breached=bool(r.password_breached), **advice)
        if r.verdict == pb.VERDICT_CHANGE_REQUIRED:
            return Answer.change_required(password_breached=bool(r.password_breached), **advice)
        # REJECT, UNSPECIFIED and any verdict this client does not know: a deny.
        return Answer(Decision.DENY, **advice)

    # Verify is routed by the client key, so one end client's calls meet one daemon's
    # per-client CPU ceiling.
    return Call("Verify", req, key, interpret, failure_answer)


def clear_attempts_call(realm: object, identifier: object, reason: object, client_key: object) -> Call:
    acct = account(realm, identifier)
    if not isinstance(reason, ClearReason):
        raise BadInput(f"reason must be ClearReason, not {type(reason).__name__}")
    req = pb.ClearAttemptsRequest(
        account=acct, reason=reason.value, client_key=text("client_key", client_key, optional=True)
    )
    return Call(
        "ClearAttempts",
        req,
        route_key(acct.realm, acct.identifier),
        lambda _r: Answer.allow(),
        failure_answer,
    )


def confirm_device_call(realm: object, identifier: object, challenge_token: object, stored_hash: object) -> Call:
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


def flow(value: object) -> Flow:
    if not isinstance(value, Flow):
        raise BadInput(f"flow must be Flow, not {type(value).__name__}")
    return value


def record_flow_attempt_call(
    realm: object, identifier: object, which: object, client_key: object, attempt_id: object
) -> Call:
    acct = account(realm, identifier)
    req = pb.RecordFlowAttemptRequest(
        account=acct,
        flow=flow(which).value,
        client_key=text("client_key", client_key, optional=True),
        attempt_id=text("attempt_id", attempt_id, optional=True) or new_attempt_id(),
    )
    return Call(
        "RecordFlowAttempt",
        req,
        route_key(acct.realm, acct.identifier),
        lambda r: decision_answer(r.decision),
        failure_answer,
    )


def clear_flow_call(realm: object, identifier: object, which: object) -> Call:
    acct = account(realm, identifier)
    req = pb.ClearFlowRequest(account=acct, flow=flow(which).value)
    return Call("ClearFlow", req, route_key(acct.realm, acct.identifier), lambda _r: Answer.allow(), failure_answer)


def check_password_failure(failed: Failed) -> PasswordCheck:
    return PasswordCheck(PasswordCheckResult.UNCHECKED, retryable=failure_is_retryable(failed))


def check_password_call(realm: object, identifier: object, password: object) -> Call:
    acct = account(realm, identifier)
    req = pb.CheckPasswordRequest(account=acct, password=secret("password", password))

    def interpret(r: pb.CheckPasswordResponse) -> PasswordCheck:
        found = {
            pb.PASSWORD_CHECK_REASON_OK: PasswordCheckResult.ACCEPTABLE,
            pb.PASSWORD_CHECK_REASON_BREACHED: PasswordCheckResult.BREACHED,
            pb.PASSWORD_CHECK_REASON_CONTEXT_WORD: PasswordCheckResult.CONTEXT_WORD,
        }.get(r.reason, PasswordCheckResult.UNCHECKED)
        return PasswordCheck(found)

    return Call(
        "CheckPassword", req, route_key(acct.realm, acct.identifier), interpret, check_password_failure
    )


def bad_input_result(method: str, error: BadInput) -> Any:
    if method == "CheckPassword":
        log.warning("portcullis: %s not sent, refused: %s", method, error)
        return PasswordCheck(PasswordCheckResult.UNCHECKED, retryable=False)
    return deny_bad_input(method, error)


def local_error(call: Call, error: BaseException) -> Any:
    """An error of this process while calling (not the daemon's): a deny. Only the
    exception's type is logged: its text could quote what was sent."""
    log.error("portcullis: %s failed locally (%s), denied", call.method, type(error).__name__)
    return call.on_failure(Failed(Failure.LOCAL))
