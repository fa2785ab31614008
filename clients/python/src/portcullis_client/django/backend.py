"""The authentication backend: Django's ``authenticate(request, username, password)``
asks the daemon's ``Verify`` with the user's stored hash (``user.password``, whatever
Django's hashers wrote: ``pbkdf2_sha256$…`` by default), or an empty one for an unknown,
inactive or passwordless user, so the daemon burns the same hash work and answers the
same reject ("no oracle").

A rehash follows Django, not the daemon alone: on ``needs_rehash`` the backend stores a
new hash (``set_password``) only when Django itself would (the stored hash's hasher is
not ``PASSWORD_HASHERS[0]``, or that hasher's ``must_update``). The daemon asking for one
Django would not make means the realm's hash target is not what Django writes: every
login would rehash to the same hash again, and unknown usernames cost another hash work
than known ones. That is logged once per process (a warning) and nothing is rehashed.
Nor is anything rehashed without ``needs_rehash`` (Django's target above the realm's):
raise the realm's target with Django's, and both agree again.

A stored hash the daemon refuses (Django's ``md5$``, ``sha1$``, ``crypt$`` and unsalted
hashers of sites upgraded from old Django versions, or a cost above the daemon's
ceiling) would be answered ``INVALID_ARGUMENT`` at once and uncounted, which tells that
account from an unknown one. The backend logs an error and asks again as for an unknown
user (an empty stored hash), so the page, the time and the counting are an unknown
user's; such a user never logs in until the hash is replaced (a password reset).

Only a plain accept returns the user. Everything else (a reject, a challenge, a required
change, a second factor, a CAPTCHA, the daemon unreachable, any error in this process
while asking, no request to take the client key from) is a refused login: what it came
to is left on ``request.portcullis_login`` (a
:class:`~portcullis_client.django.outcome.LoginOutcome`) and sent with the
``login_outcome`` signal, and then ``authenticate`` raises
``django.core.exceptions.PermissionDenied``. ``django.contrib.auth.authenticate()``
catches that itself: it tries no further backend, sends ``user_login_failed`` and
returns ``None``, so Django's login view never sees an exception. Without it, a
``ModelBackend`` listed after this one (the system check ``portcullis.E002`` says so,
but checks do not run under gunicorn or the test Client) would compare the password
itself and let in every login the daemon refused: a locked account, or everyone while
the daemon is down. Nothing else is raised. A call without a password (another
backend's credentials) is not a password login: ``None``, and the next backend is tried.

``aauthenticate`` (``django.contrib.auth.aauthenticate()``, async views) is
``authenticate`` in a thread, not ``ModelBackend``'s, which compares the password
itself.

List it *instead of* ``django.contrib.auth.backends.ModelBackend`` all the same. It
inherits ``ModelBackend``'s permissions and ``get_user``.
"""

from __future__ import annotations

import logging
from typing import Any

import grpc
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.hashers import get_hasher, identify_hasher
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

from .._answer import Answer
from .._process import Lock
from .conf import get_client, get_settings
from .http import PENDING_ATTR, client_key, device_cookie_name
from .outcome import Kind, LoginOutcome, decide, login_outcome

__all__ = ["PortcullisBackend"]

log = logging.getLogger("portcullis_client.django")

#: Where the outcome of the request's login is left.
OUTCOME_ATTR = "portcullis_login"

#: Whether this process warned that the realm's hash target is not Django's hasher.
_warned_target = False
_warned_lock = Lock()


def django_would_rehash(encoded: str) -> bool:
    """Whether Django's own ``check_password`` would store a new hash for ``encoded``
    after a right password: its hasher is not ``PASSWORD_HASHERS[0]`` (or Django does
    not know it), or that hasher's ``must_update`` (fewer iterations, say)."""
    preferred = get_hasher("default")
    try:
        current = identify_hasher(encoded)
    except ValueError:
        return True
    return bool(current.algorithm != preferred.algorithm or preferred.must_update(encoded))


def refused_stored_hash(answer: Answer) -> bool:
    """Whether ``answer`` is the daemon refusing the stored hash it was sent (a format it
    does not verify, such as Django's ``md5$``, ``sha1$``, ``crypt$`` and unsalted
    hashers, or a cost above its ceiling): ``INVALID_ARGUMENT`` whose message begins
    with ``stored_hash``."""
    return (
        not answer.allowed
        and not answer.retryable
        and answer.status_code is grpc.StatusCode.INVALID_ARGUMENT
        and (answer.status_details or "").startswith("stored_hash")
    )


def _warn_target_mismatch(realm: str) -> None:
    global _warned_target
    with _warned_lock:
        if _warned_target:
            return
        _warned_target = True
    log.warning(
        "portcullis: realm %r: the realm's hash target does not match Django's PASSWORD_HASHERS[0] "
        "(the daemon asks to rehash a password Django would not rehash), so unknown usernames cost "
        "a different hash work than known ones (a timing oracle). Set [realms.NAME.hash] to what "
        'Django writes (docs/verify.md, "A site keeps the hasher its framework writes"; Django '
        '5.2\'s default: algorithm = "pbkdf2_sha256", pbkdf2_iterations = 1000000). Nothing is '
        "rehashed; this is logged once per process.",
        realm,
    )


class PortcullisBackend(ModelBackend):
    """``django.contrib.auth`` backend that checks passwords through the daemon (see the
    module's text). ``authenticate`` returns the user only for a plain accept and raises
    ``PermissionDenied`` for every refused login."""

    def authenticate(
        self, request: HttpRequest | None, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> Any:
        """The user for an accepted password. Every refused password login raises
        ``PermissionDenied`` (after ``request.portcullis_login`` is set and the signal
        sent), which ``django.contrib.auth.authenticate()`` turns into ``None`` without
        trying the backends after this one; nothing else is ever raised. ``request`` is
        required (the client key and the device cookie come from it): without one, a
        refused login. Without a password (another backend's credentials), ``None``."""
        if password is None:
            return None
        try:
            if username is None:
                model: Any = get_user_model()
                username = kwargs.get(model.USERNAME_FIELD)
            if request is None or not isinstance(username, str) or not isinstance(password, str):
                raise PermissionDenied
            try:
                outcome = self._check(request, username, password)
            except Exception as e:  # noqa: BLE001 - fail closed; the type only (the text could quote a value)
                log.error("portcullis: the login check failed in this process (%s): refused", type(e).__name__)
                outcome = LoginOutcome(Kind.UNAVAILABLE, username)
            setattr(request, OUTCOME_ATTR, outcome)
            try:
                login_outcome.send(sender=type(self), request=request, outcome=outcome)
            except Exception as e:  # noqa: BLE001 - a receiver's error must not let a login through or raise
                log.error("portcullis: a login_outcome receiver failed (%s)", type(e).__name__)
                raise PermissionDenied from None
            if outcome.allowed and outcome.user is not None:
                return outcome.user
        except PermissionDenied:
            raise
        except Exception as e:  # noqa: BLE001 - anything else here is a refused login too
            log.error("portcullis: the login check failed in this process (%s): refused", type(e).__name__)
        # Refused: stop django.contrib.auth.authenticate() here, so no backend listed
        # after this one (ModelBackend) compares the password itself.
        raise PermissionDenied

    async def aauthenticate(
        self, request: HttpRequest | None, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> Any:
        """``authenticate`` in a thread, for ``django.contrib.auth.aauthenticate()``:
        ``ModelBackend``'s own (Django 5.2) would compare the password itself and never
        ask the daemon."""
        return await sync_to_async(self.authenticate)(request, username=username, password=password, **kwargs)

    def _check(self, request: HttpRequest, username: str, password: str) -> LoginOutcome:
        conf = get_settings()
        user = self._find(username)
        stored = user.password if user is not None else ""
        cookie = device_cookie_name(conf, username)

        def ask(stored_hash: str) -> Answer:
            return get_client().verify(
                realm=conf.realm,
                identifier=username,
                password=password,
                stored_hash=stored_hash,
                client_key=client_key(request, conf),
                device_token=request.COOKIES.get(cookie) or None,
            )

        answer = ask(stored)
        if stored and refused_stored_hash(answer):
            # Answered at once and uncounted, this would tell the account from an
            # unknown one (by time, and by never reaching the CAPTCHA): ask as for an
            # unknown user instead (the dummy hash: the same work, counted, rejected).
            log.error(
                "portcullis: a stored hash the daemon cannot verify; the account is treated as "
                "unknown: migrate it, see docs/verify.md"
            )
            user = None
            answer = ask("")
        kind, send_code = decide(answer, conf, user)
        rehashed = False
        if answer.allowed and user is not None and answer.needs_rehash:
            if django_would_rehash(stored):
                # The realm's target moved on, and Django's with it: store the site's
                # own hash of the password.
                user.set_password(password)
                user.save(update_fields=["password"])
                rehashed = True
            else:
                # Django would write the same hash again: every login would rehash.
                _warn_target_mismatch(conf.realm)
        if kind is Kind.ALLOW and answer.device_token and not rehashed:
            # A device token vouches for the stored hash it was issued against: after a
            # rehash the next accept issues one for the new hash.
            setattr(request, PENDING_ATTR, (cookie, answer.device_token))
        matched = kind in (Kind.ALLOW, Kind.SECOND_FACTOR, Kind.CHANGE_REQUIRED) or send_code
        return LoginOutcome(
            kind,
            username,
            user=user if matched else None,
            send_code=send_code,
            password_breached=answer.password_breached,
            rehashed=rehashed,
            answer=answer,
        )

    def _find(self, username: str) -> Any:
        """The user ``username`` names who may log in with a password, else ``None``."""
        model: Any = get_user_model()
        try:
            user = model._default_manager.get_by_natural_key(username)
        except model.DoesNotExist:
            return None
        if not self.user_can_authenticate(user) or not user.has_usable_password():
            return None
        return user
