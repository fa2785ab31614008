"""What a call answers: a two-valued :class:`Decision` on an :class:`Answer`, and how a
daemon's answer or a failure becomes one. Every failure is a deny."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import grpc


class Decision(enum.Enum):
    """The answer's decision. Every failure is ``DENY``."""

    #: The daemon explicitly allowed (``DECISION_ALLOW``, ``VERDICT_ACCEPT``, or a
    #: completed ``ClearAttempts``).
    ALLOW = "allow"
    #: Anything else.
    DENY = "deny"


@dataclass(frozen=True, repr=False, eq=True)
class Answer:
    """What a call answered. ``decision`` is the only field that decides a login.

    An ``Answer`` has no truth value (``if answer:`` raises ``TypeError``): test
    ``answer.allowed`` or ``answer.decision``, so that no object that merely exists reads
    as an allow.
    """

    decision: Decision
    #: On an allowed ``verify`` only: store a new hash at the realm's target.
    needs_rehash: bool = False
    #: On a deny only: the daemon refused for capacity, could not be reached or could not
    #: reach its store, so the same login may succeed later (answer 503 with
    #: ``Retry-After``). ``False`` for a reject, a closed door and bad input.
    retryable: bool = False
    #: On an allowed ``verify`` only: the fresh device token for this account
    #: (docs/devices.md). Never printed by ``repr``.
    device_token: str | None = None
    #: On a ``verify`` the daemon answered: the password is being sprayed across the
    #: realm's accounts (docs/spray.md). On an allow, demand a second factor.
    spray_suspected: bool = False
    #: On a ``verify`` or ``record_attempt`` the daemon answered: challenge the end
    #: client (CAPTCHA, second factor) before its next attempt at this account.
    step_up: bool = False
    #: On a ``verify`` or ``record_attempt`` the daemon answered: the client's network
    #: used up its bucket of failed logins in a realm whose ``network_action`` is
    #: ``flag``. Implies ``step_up``.
    network_throttled: bool = False
    #: On an allowed ``verify`` only: the password is in the daemon's breach filter
    #: (docs/breach.md): let the login through, then force a password change.
    password_breached: bool = False

    @property
    def allowed(self) -> bool:
        """``decision is Decision.ALLOW``."""
        return self.decision is Decision.ALLOW

    def is_allowed(self) -> bool:
        """``decision is Decision.ALLOW`` (the Rust client's name)."""
        return self.allowed

    def __bool__(self) -> bool:
        raise TypeError("an Answer has no truth value: test answer.allowed")

    def __repr__(self) -> str:
        # The device token is a credential for the device's bucket: never printed.
        token = None if self.device_token is None else "<redacted>"
        return (
            f"Answer(decision={self.decision.value}, needs_rehash={self.needs_rehash}, "
            f"retryable={self.retryable}, device_token={token}, "
            f"spray_suspected={self.spray_suspected}, step_up={self.step_up}, "
            f"network_throttled={self.network_throttled}, "
            f"password_breached={self.password_breached})"
        )

    __str__ = __repr__

    @classmethod
    def allow(cls, needs_rehash: bool = False) -> "Answer":
        return cls(Decision.ALLOW, needs_rehash=needs_rehash)

    @classmethod
    def deny(cls, retryable: bool) -> "Answer":
        return cls(Decision.DENY, retryable=retryable)


class PasswordCheckResult(enum.Enum):
    """What ``check_password`` found. Only ``ACCEPTABLE`` accepts the new password."""

    #: Neither in the breach filter nor holding a context word.
    ACCEPTABLE = "acceptable"
    #: In the breach filter: ask for another password.
    BREACHED = "breached"
    #: Holds the identifier, its part before ``@`` or a service word: ask for another.
    CONTEXT_WORD = "context_word"
    #: The check was not made (no filter configured, the daemon unreachable, any other
    #: failure): refuse the password; ``retryable`` says whether it may succeed later.
    UNCHECKED = "unchecked"


@dataclass(frozen=True)
class PasswordCheck:
    """The answer of ``check_password`` (docs/breach.md)."""

    result: PasswordCheckResult
    #: ``UNCHECKED`` only: capacity or reachability, not the password.
    retryable: bool = False

    @property
    def acceptable(self) -> bool:
        return self.result is PasswordCheckResult.ACCEPTABLE

    def is_acceptable(self) -> bool:
        return self.acceptable

    def __bool__(self) -> bool:
        raise TypeError("a PasswordCheck has no truth value: test check.acceptable")


class ClearReason(enum.Enum):
    """Why an account's record is cleared (nothing else clears it)."""

    #: The gateway compared the hash itself and it matched.
    PASSWORD_VERIFIED = 1
    #: A password reset was completed (not merely requested).
    PASSWORD_RESET_COMPLETED = 2


class Failure(enum.Enum):
    """How one logical call ended when it did not return the daemon's message."""

    #: The daemon answered with a status: never retried, never a health failure.
    ANSWERED = "answered"
    #: Connection refused, reset, unreachable, protocol garbage: retried.
    TRANSPORT = "transport"
    #: No answer within the call deadline: not retried (the daemon may be working).
    TIMEOUT = "timeout"
    #: No endpoint could take the call (the circuit breaker is open).
    BREAKER_OPEN = "breaker_open"
    #: The call could not be made at all (bad input from the gateway, a local error).
    LOCAL = "local"


@dataclass(frozen=True)
class Failed:
    """A failed call: its kind and, for ``ANSWERED``, the status the daemon sent."""

    kind: Failure
    code: grpc.StatusCode | None = None


RETRYABLE_STATUSES = frozenset({grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE})


def failure_is_retryable(failed: Failed) -> bool:
    """Every failure is a deny; some are worth trying again later."""
    if failed.kind is Failure.ANSWERED:
        return failed.code in RETRYABLE_STATUSES
    return failed.kind in (Failure.TRANSPORT, Failure.TIMEOUT, Failure.BREAKER_OPEN)


def failure_answer(failed: Failed) -> Answer:
    return Answer.deny(failure_is_retryable(failed))
