"""What a login or a reset request came to, for the site's pages: one :class:`Kind` per
page, decided from the daemon's answer in the order the repository's example gateway
(``client/examples/gateway.rs``) uses, and the signals a site hooks."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from django.dispatch import Signal

from .._answer import Answer, AnswerKind
from .conf import PortcullisSettings

__all__ = ["Kind", "LoginOutcome", "ResetOutcome", "decide", "login_outcome", "reset_outcome"]

#: Sent after every login the backend checked: ``sender`` is the backend's class,
#: ``request`` the request, ``outcome`` the :class:`LoginOutcome`. A receiver sends the
#: one-time code when ``outcome.send_code`` (queue it; never inline).
login_outcome = Signal()

#: Sent after every reset request :func:`~portcullis_client.django.views.password_reset_request`
#: counted: ``sender`` is ``None``, ``request``, ``outcome`` the :class:`ResetOutcome`.
reset_outcome = Signal()


class Kind(enum.Enum):
    """Which page a login gets. Only ``ALLOW`` starts a session."""

    #: The password matched: sign in (the device cookie is set on the response).
    ALLOW = "allow"
    #: The password matched, and the daemon asks for a second factor first (the password
    #: is being sprayed, or the account is near its lockout): no session yet.
    SECOND_FACTOR = "second_factor"
    #: The one challenge page ("we sent you a code"): a right password from a device the
    #: account does not know (``send_code``), or, in a ``STEP_UP`` site, every other
    #: refused login that is not ``UNAVAILABLE`` (no code; docs/devices.md, "No checker").
    CHALLENGE = "challenge"
    #: The password matched but is breached and out of grace logins: a password change,
    #: no session.
    CHANGE_REQUIRED = "change_required"
    #: A CAPTCHA before the next attempt: the client's network is throttled (whatever the
    #: password), or the account is near its lockout. The same page right or wrong.
    CAPTCHA = "captcha"
    #: The one failure page: a wrong password, an unknown, disabled or locked account,
    #: an error status.
    DENY = "deny"
    #: The daemon could not answer now (unreachable, late, out of CPU budget, its store
    #: down) or this process failed: 503 with ``Retry-After``, the same for every account.
    UNAVAILABLE = "unavailable"


@dataclass(frozen=True)
class LoginOutcome:
    """One checked login. ``user`` is set only when the password matched (``ALLOW``,
    ``SECOND_FACTOR``, ``CHANGE_REQUIRED``, and a ``CHALLENGE`` with ``send_code``), so a
    receiver cannot tell a wrong password from an unknown account by it."""

    kind: Kind
    #: What the user typed.
    identifier: str
    #: The site's user object when the password matched, else ``None``.
    user: Any = None
    #: ``CHALLENGE`` only: a real challenge, whose code the site sends.
    send_code: bool = False
    #: ``ALLOW``: the password is breached: sign in, then force a change.
    password_breached: bool = False
    #: The stored hash was rehashed with the site's hasher (``needs_rehash``).
    rehashed: bool = False
    #: The daemon's answer (``None`` when there was none to give).
    answer: Answer | None = field(default=None, repr=False)

    @property
    def allowed(self) -> bool:
        """Only ``ALLOW`` signs in."""
        return self.kind is Kind.ALLOW


@dataclass(frozen=True)
class ResetOutcome:
    """One counted reset request. Send the mail only when ``send_mail`` *and* the
    account exists; answer every name with the same page. ``retryable``: the daemon
    could not answer (503 for every name alike)."""

    send_mail: bool
    retryable: bool


def decide(answer: Answer, conf: PortcullisSettings, matched_user: Any) -> tuple[Kind, bool]:
    """The page for ``answer`` and whether a code is to be sent. ``matched_user`` is the
    site's user whose stored hash was sent (``None`` for an unknown or disabled one)."""
    if not answer.allowed and answer.retryable:
        return Kind.UNAVAILABLE, False
    if answer.network_throttled:
        # Whatever the verdict: another page for a right password would tell a
        # credential stuffer which of its passwords was right.
        return Kind.CAPTCHA, False
    if answer.kind is AnswerKind.CHALLENGE and matched_user is not None:
        return Kind.CHALLENGE, True
    if answer.kind is AnswerKind.CHANGE_REQUIRED and matched_user is not None:
        return Kind.CHANGE_REQUIRED, False
    if not answer.allowed or matched_user is None:
        if conf.step_up:
            return Kind.CHALLENGE, False
        return (Kind.CAPTCHA if answer.step_up else Kind.DENY), False
    if conf.second_factor_on_signals and (answer.spray_suspected or answer.step_up):
        return Kind.SECOND_FACTOR, False
    return Kind.ALLOW, False
