"""What a call answers: a two-valued :class:`Decision` on an :class:`Answer`, the
answer's :class:`AnswerKind` (a ``verify`` deny may be a challenge or a required
password change), the flows around the login, and how a daemon's answer or a failure
becomes an answer. Every failure is a deny."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TypedDict, Unpack

import grpc


class Decision(enum.Enum):
    """The answer's decision. Every failure is ``DENY``."""

    #: The daemon explicitly allowed (``DECISION_ALLOW``, ``VERDICT_ACCEPT``, or a
    #: completed ``ClearAttempts``).
    ALLOW = "allow"
    #: Anything else.
    DENY = "deny"


class AnswerKind(enum.Enum):
    """What the answer was, one value each. ``ALLOW`` exactly when the decision is
    ``ALLOW``; the others are denies. A ``verify`` whose password was right may be a
    ``CHALLENGE`` (``VERDICT_CHALLENGE``: ask for a second factor, then
    ``confirm_device`` with ``challenge_token``) or a ``CHANGE_REQUIRED``
    (``VERDICT_CHANGE_REQUIRED``: no session before a password change). Neither logs in:
    their decision is ``DENY``."""

    ALLOW = "allow"
    DENY = "deny"
    CHALLENGE = "challenge"
    CHANGE_REQUIRED = "change_required"


class ChallengeReason(enum.Enum):
    """Why a ``CHALLENGE``."""

    #: ``CHALLENGE_REASON_NEW_DEVICE``: no valid device token of this account and
    #: credential came with the login.
    NEW_DEVICE = "new_device"
    #: A reason this client does not know (still a challenge).
    UNKNOWN = "unknown"


class Flow(enum.Enum):
    """A flow around the login (``portcullis.v1.Flow``; docs/flows.md), each with its own
    record per account. The values are the wire numbers."""

    #: Attempts at a one-time code (TOTP, a mailed or texted code).
    SECOND_FACTOR = 1
    #: Attempts at a recovery (backup) code.
    RECOVERY_CODE = 2
    #: Requests to send a password-reset mail (needs a client key).
    PASSWORD_RESET = 3
    #: Requests to resend an address-verification mail (needs a client key).
    VERIFICATION_RESEND = 4

    @property
    def is_mail(self) -> bool:
        """Whether the flow sends mail (its requests need a ``client_key``, and no
        gateway call clears its caps) rather than checks a code."""
        return self in (Flow.PASSWORD_RESET, Flow.VERIFICATION_RESEND)


class Advice(TypedDict, total=False):
    """The advice any ``verify`` answer carries besides its verdict (see :class:`Answer`)."""

    spray_suspected: bool
    step_up: bool
    network_throttled: bool


class Signals(Advice, total=False):
    """:class:`Advice`, whether the password is breached (a right password's answers),
    and whether the attempt brought its record to the ceiling (a challenge's)."""

    password_breached: bool
    ceiling_reached: bool


@dataclass(frozen=True, repr=False, eq=True)
class Answer:
    """What a call answered. ``decision`` is the only field that decides a login;
    ``kind`` says which deny it was when a ``verify`` needs a challenge or a password
    change (``allowed`` is ``True`` only for ``AnswerKind.ALLOW``).

    An ``Answer`` has no truth value (``if answer:`` raises ``TypeError``): test
    ``answer.allowed`` or ``answer.decision``, so that no object that merely exists reads
    as an allow. No deny holds a device token or ``needs_rehash``: constructing one that
    does raises ``ValueError``.
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
    #: On an allowed ``verify``: the password is in the daemon's breach filter
    #: (docs/breach.md): let the login through, then force a password change. Also on a
    #: ``CHALLENGE`` (ask for the change once the challenge passed) and a
    #: ``CHANGE_REQUIRED``.
    password_breached: bool = False
    #: ``ALLOW`` exactly when ``decision`` is ``ALLOW``; on a ``verify`` deny,
    #: ``CHALLENGE`` or ``CHANGE_REQUIRED`` where the password was right. Derived from
    #: ``decision`` when not given.
    kind: AnswerKind | None = None
    #: On a ``CHALLENGE`` only: what ``confirm_device`` takes once the second factor
    #: passed (within 15 minutes, with the same stored hash). Keep it in the gateway's
    #: server-side session, never in a URL. Never printed by ``repr``.
    challenge_token: str | None = None
    #: On a ``CHALLENGE`` only: why.
    challenge_reason: ChallengeReason | None = None
    #: On a deny that is a failed call the daemon answered with an error status: the
    #: status's code (``INVALID_ARGUMENT``, ``FAILED_PRECONDITION``, ...), else ``None``.
    #: For logs and for telling one refused input from another; never a decision. Not
    #: compared by ``==``.
    status_code: grpc.StatusCode | None = field(default=None, compare=False)
    #: With ``status_code``: the status's message. The daemon's messages name a field and
    #: its problem, never a value sent (one refusing the stored hash begins with
    #: ``stored_hash``). Not compared by ``==`` and never printed by ``repr``.
    status_details: str | None = field(default=None, compare=False)
    #: On a deny that is a failed call which got no answer (a transport failure) whose
    #: cause the client could tell: why, in words for a log. So far the TLS failures of
    #: an ``https://`` endpoint: ``"TLS handshake refused: the daemon refused this client
    #: certificate: it has expired or is not yet valid (certificate_expired)"``, ``"TLS
    #: handshake refused: the daemon's certificate is not signed by a CA in tls ca_file
    #: (…)"`` (README.md, "TLS failures"). Advice only: the answer is the same deny with
    #: or without it. Never holds a key, a token or a request field. Not compared by
    #: ``==``.
    failure_reason: str | None = field(default=None, compare=False)
    #: On a deny of ``verify``, ``record_attempt`` or a code flow's
    #: ``record_flow_attempt``: this very attempt started a lockout (the first its record
    #: refused in the window). For the gateway only, which may tell the account's owner;
    #: show the end user the same page as for any deny. Set once per lockout, never on a
    #: retry of the same attempt id (docs/gateways.md, "When an attempt shuts the door").
    lockout_started: bool = False
    #: This attempt brought its record to the consecutive-failure ceiling
    #: (docs/throttle.md, "The ceiling"): the door stays shut until a success, a
    #: completed reset or an operator's unlock (after an allowed ``record_attempt``: if
    #: the password turns out wrong). For the gateway only.
    ceiling_reached: bool = False

    def __post_init__(self) -> None:
        kind = self.kind
        if kind is None:
            kind = AnswerKind.ALLOW if self.decision is Decision.ALLOW else AnswerKind.DENY
            object.__setattr__(self, "kind", kind)
        if not isinstance(self.decision, Decision) or not isinstance(kind, AnswerKind):
            raise TypeError("decision must be a Decision and kind an AnswerKind")
        if (self.decision is Decision.ALLOW) != (kind is AnswerKind.ALLOW):
            raise ValueError(f"an answer of kind {kind.value} cannot have decision {self.decision.value}")
        if kind is not AnswerKind.ALLOW and (self.device_token is not None or self.needs_rehash):
            raise ValueError("a deny carries no device token and no needs_rehash")
        if (kind is AnswerKind.CHALLENGE) != bool(self.challenge_token):
            raise ValueError("a challenge token comes with a challenge, and only with one")
        if (kind is AnswerKind.CHALLENGE) != (self.challenge_reason is not None):
            raise ValueError("a challenge reason comes with a challenge, and only with one")
        failure = (self.status_code, self.status_details, self.failure_reason)
        if kind is not AnswerKind.DENY and any(f is not None for f in failure):
            raise ValueError("only a plain deny carries a failed call's status or reason")

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
        # The device token is a credential for the device's bucket, the challenge token
        # one step from it: never printed.
        token = None if self.device_token is None else "<redacted>"
        challenge = None if self.challenge_token is None else "<redacted>"
        reason = None if self.challenge_reason is None else self.challenge_reason.value
        kind = None if self.kind is None else self.kind.value
        return (
            f"Answer(decision={self.decision.value}, kind={kind}, "
            f"needs_rehash={self.needs_rehash}, "
            f"retryable={self.retryable}, device_token={token}, "
            f"spray_suspected={self.spray_suspected}, step_up={self.step_up}, "
            f"network_throttled={self.network_throttled}, "
            f"password_breached={self.password_breached}, "
            f"challenge_token={challenge}, challenge_reason={reason}, "
            f"lockout_started={self.lockout_started}, ceiling_reached={self.ceiling_reached}"
            + ("" if self.status_code is None else f", status_code={self.status_code.name}")
            + ("" if self.failure_reason is None else f", failure_reason={self.failure_reason!r}")
            + ")"
        )

    __str__ = __repr__

    @classmethod
    def allow(cls, needs_rehash: bool = False) -> Answer:
        """An allow with no signals."""
        return cls(Decision.ALLOW, needs_rehash=needs_rehash)

    @classmethod
    def deny(cls, retryable: bool) -> Answer:
        """A plain deny; ``retryable`` when the same login may succeed later."""
        return cls(Decision.DENY, retryable=retryable)

    @classmethod
    def challenge(cls, token: str, reason: ChallengeReason, **signals: Unpack[Signals]) -> Answer:
        """A right password that needs a second factor first: a deny of kind
        ``CHALLENGE`` carrying ``token``. Without a token it could never be confirmed:
        a plain deny."""
        if not isinstance(token, str) or not token:
            signals.pop("password_breached", None)  # as on any plain deny
            return cls(Decision.DENY, **signals)
        return cls(Decision.DENY, kind=AnswerKind.CHALLENGE, challenge_token=token, challenge_reason=reason, **signals)

    @classmethod
    def change_required(cls, **signals: Unpack[Signals]) -> Answer:
        """A right password that must be changed before any session: a deny of kind
        ``CHANGE_REQUIRED``."""
        return cls(Decision.DENY, kind=AnswerKind.CHANGE_REQUIRED, **signals)


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
    #: ``UNCHECKED`` only: as :attr:`Answer.failure_reason` (``"TLS handshake refused:
    #: …"``). Not compared by ``==``.
    failure_reason: str | None = field(default=None, compare=False)

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
    """A failed call: its kind and, for ``ANSWERED``, the status the daemon sent (its
    code and message); for ``TRANSPORT``, the details of the status grpc made up (read
    only to explain a TLS failure) and ``reason``, the explanation when there is one
    (``_tls.py``)."""

    kind: Failure
    code: grpc.StatusCode | None = None
    details: str | None = None
    reason: str | None = None


RETRYABLE_STATUSES = frozenset({grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE})


def failure_is_retryable(failed: Failed) -> bool:
    """Every failure is a deny; some are worth trying again later."""
    if failed.kind is Failure.ANSWERED:
        return failed.code in RETRYABLE_STATUSES
    return failed.kind in (Failure.TRANSPORT, Failure.TIMEOUT, Failure.BREAKER_OPEN)


def failure_answer(failed: Failed) -> Answer:
    """A deny; for a status the daemon answered, carrying its code and message; for a
    transport failure the client could explain, the reason."""
    if failed.kind is Failure.ANSWERED and failed.code is not None:
        return Answer(
            Decision.DENY,
            retryable=failure_is_retryable(failed),
            status_code=failed.code,
            status_details=failed.details,
        )
    if failed.kind is Failure.TRANSPORT and failed.reason is not None:
        return Answer(Decision.DENY, retryable=failure_is_retryable(failed), failure_reason=failed.reason)
    return Answer.deny(failure_is_retryable(failed))
