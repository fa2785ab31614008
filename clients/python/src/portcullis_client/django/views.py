"""Ready views a site routes to, and the helpers they are made of.

- :class:`LoginView`: Django's ``LoginView`` whose refused logins get the page their
  :class:`~portcullis_client.django.outcome.Kind` calls for (503, CAPTCHA, the one
  challenge page, the change page, the second-factor page, or the form again with
  Django's one error). In a ``STEP_UP`` site every refused login that is not
  ``UNAVAILABLE`` gets the one challenge page, as the example gateway does.
- :class:`CodeView` and :func:`code_step`: the code step of a challenge page.
- :class:`PasswordResetView` and :func:`password_reset_request`: the "forgot password"
  form, counted by the daemon for every name typed, one page for every name.

Every page that follows a password carries ``Cache-Control: no-store``.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django import forms
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth import login as auth_login
from django.contrib.auth import views as auth_views
from django.core.mail import EmailMultiAlternatives
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import resolve_url
from django.template import loader
from django.template.response import TemplateResponse
from django.utils.decorators import method_decorator
from django.views.decorators.csrf import csrf_protect
from django.views.decorators.debug import sensitive_post_parameters
from django.views.generic.edit import FormView

from .backend import OUTCOME_ATTR, PortcullisBackend
from .conf import get_client, get_settings
from .http import PENDING_ATTR, client_key, device_cookie_name, set_device_cookie
from .outcome import Kind, LoginOutcome, ResetOutcome, reset_outcome

__all__ = ["CodeView", "LoginView", "PasswordResetView", "code_step", "password_reset_request"]

log = logging.getLogger("portcullis_client.django")

#: The session key of a login waiting for its code.
PENDING_SESSION_KEY = "portcullis_pending"
#: How long a challenge page's code is accepted: the challenge token's lifetime.
CHALLENGE_TTL = 15 * 60
_BACKEND = f"{PortcullisBackend.__module__}.{PortcullisBackend.__qualname__}"

_PAGES = {
    Kind.UNAVAILABLE: ("portcullis/unavailable.html", 503),
    Kind.CAPTCHA: ("portcullis/captcha.html", 401),
    Kind.CHALLENGE: ("portcullis/challenge.html", 200),
    Kind.CHANGE_REQUIRED: ("portcullis/change_required.html", 200),
    Kind.SECOND_FACTOR: ("portcullis/second_factor.html", 401),
}


def _page(request: HttpRequest, kind: Kind, context: dict[str, Any] | None = None) -> HttpResponse:
    template, status = _PAGES[kind]
    response = TemplateResponse(request, template, context or {}, status=status)
    response["Cache-Control"] = "no-store"
    if kind is Kind.UNAVAILABLE:
        response["Retry-After"] = "1"
    return response


def _new_decoy() -> str:
    """The account a decoy pending login's code step counts on: a random one of its own
    (a ``.invalid`` address no one can hold), so each page no code completes gets fresh
    tries as a real challenge's page does, never touches the real account's record, and
    a checker who spent one decoy's tries cannot tell the next wrong password's page
    from the right password's by its first code."""
    return f"{secrets.token_hex(12)}@decoy.invalid"


def challenge_page(request: HttpRequest, outcome: LoginOutcome | None) -> HttpResponse:
    """The one challenge page. A real challenge's pending login keeps the user's id and
    the challenge token in the (server-side) session; every other one a pending login
    that no code completes. The page is the same either way."""
    identifier = outcome.identifier if outcome is not None else ""
    pending: dict[str, Any] = {"identifier": identifier, "expires": time.time() + CHALLENGE_TTL}
    answer = outcome.answer if outcome is not None else None
    if outcome is not None and outcome.send_code and answer is not None and answer.challenge_token:
        pending.update(user=str(outcome.user.pk), token=answer.challenge_token, breached=outcome.password_breached)
    else:
        pending.update(decoy=_new_decoy())
    request.session[PENDING_SESSION_KEY] = pending
    return _page(request, Kind.CHALLENGE)


class LoginView(auth_views.LoginView):
    """``django.contrib.auth.views.LoginView`` for :class:`PortcullisBackend` (see the
    module's text). Templates: ``portcullis/login.html`` and the pages of each kind,
    ``portcullis/<kind>.html``; override them in the site's templates."""

    template_name = "portcullis/login.html"

    def form_valid(self, form: Any) -> HttpResponse:
        """Signs in; sets the device cookie; a breached password goes to
        ``PASSWORD_CHANGE_URL`` when it is set."""
        response: HttpResponse = super().form_valid(form)
        outcome = getattr(self.request, OUTCOME_ATTR, None)
        change = get_settings().password_change_url
        if outcome is not None and outcome.password_breached and change:
            response = HttpResponseRedirect(change)
        set_device_cookie(self.request, response)
        response["Cache-Control"] = "no-store"
        return response

    def form_invalid(self, form: Any) -> HttpResponse:
        """The page of the refused login's kind (see the module's text)."""
        outcome: LoginOutcome | None = getattr(self.request, OUTCOME_ATTR, None)
        kind = outcome.kind if outcome is not None else Kind.DENY
        if kind is Kind.UNAVAILABLE or kind is Kind.CAPTCHA:
            return _page(self.request, kind)
        if kind is Kind.CHALLENGE or (get_settings().step_up and kind is Kind.DENY):
            return challenge_page(self.request, outcome)
        if kind in (Kind.CHANGE_REQUIRED, Kind.SECOND_FACTOR):
            return _page(self.request, kind, {"identifier": outcome.identifier if outcome else ""})
        response: HttpResponse = super().form_invalid(form)
        response["Cache-Control"] = "no-store"
        return response


@dataclass(frozen=True)
class CodeOutcome:
    """What one code came to. ``user`` is set only when ``allowed`` (then sign in)."""

    #: ``allow``, ``wrong_code``, ``too_many_codes``, ``unavailable`` or ``sign_in_again``.
    kind: str
    user: Any = None
    password_breached: bool = False

    @property
    def allowed(self) -> bool:
        """Only ``allow`` signs in."""
        return self.kind == "allow"


def code_step(request: HttpRequest, code: str) -> CodeOutcome:
    """The code step of the session's pending login. Each code is counted through
    ``FLOW_SECOND_FACTOR`` before it is looked at (for a page no code completes, on the
    random decoy account of that pending login); a right code of a real challenge
    exchanges the challenge token for a device token (``ConfirmDevice``), left for the
    response. ``PORTCULLIS["CHECK_CODE"]`` says whether the code is right."""
    conf = get_settings()
    pending = request.session.get(PENDING_SESSION_KEY)
    if not isinstance(pending, dict) or float(pending.get("expires", 0)) < time.time():
        return CodeOutcome("sign_in_again")
    identifier = str(pending.get("identifier", ""))
    real = "token" in pending
    if not real and not pending.get("decoy"):
        # A pending login stored without its decoy (by an earlier version): one now.
        pending["decoy"] = _new_decoy()
        request.session[PENDING_SESSION_KEY] = pending
    attempt = get_client().second_factor_attempt(conf.realm, identifier if real else str(pending["decoy"]))
    if not attempt.allowed:
        return CodeOutcome("unavailable" if attempt.retryable else "too_many_codes")
    right = False
    if conf.check_code is None:
        log.error('portcullis: PORTCULLIS["CHECK_CODE"] is not set: no code is right')
    else:
        try:
            right = bool(conf.check_code(identifier, code))
        except Exception as e:  # noqa: BLE001 - a failing check is a wrong code
            log.error("portcullis: CHECK_CODE failed (%s): the code is refused", type(e).__name__)
    if not (real and right):
        return CodeOutcome("wrong_code")
    user = get_user_model()._default_manager.filter(pk=pending["user"]).first()
    if user is None:
        return CodeOutcome("sign_in_again")
    confirmed = get_client().confirm_device(
        realm=conf.realm, identifier=identifier, challenge_token=str(pending["token"]), stored_hash=user.password
    )
    if not confirmed.allowed:
        return CodeOutcome("unavailable" if confirmed.retryable else "sign_in_again")
    del request.session[PENDING_SESSION_KEY]
    if confirmed.device_token:
        setattr(request, PENDING_ATTR, (device_cookie_name(conf, identifier), confirmed.device_token))
    return CodeOutcome("allow", user=user, password_breached=bool(pending.get("breached")))


class CodeForm(forms.Form):
    """The one field of the code step."""

    code = forms.CharField(max_length=64, strip=True)


@method_decorator([sensitive_post_parameters(), csrf_protect], name="dispatch")
class CodeView(FormView):  # type: ignore[type-arg]
    """``POST`` the code of the challenge page (:func:`code_step`): signs in on a right
    code of a real challenge and redirects to ``LOGIN_REDIRECT_URL``; every other code
    gets ``portcullis/challenge.html`` again (``wrong_code``), the too-many-codes page
    (429), the 503 page, or the login page (``sign_in_again``). CSRF-protected and its
    POST kept out of error reports, as Django's ``LoginView`` is, whatever the site's
    middleware."""

    form_class = CodeForm
    template_name = "portcullis/challenge.html"

    def form_valid(self, form: CodeForm) -> HttpResponse:
        """The code step, then the page its outcome calls for."""
        outcome = code_step(self.request, form.cleaned_data["code"])
        if outcome.kind == "unavailable":
            return _page(self.request, Kind.UNAVAILABLE)
        response: HttpResponse
        if outcome.kind == "too_many_codes":
            response = TemplateResponse(self.request, "portcullis/too_many_codes.html", {}, status=429)
        elif outcome.kind == "sign_in_again":
            response = HttpResponseRedirect(resolve_url(settings.LOGIN_URL))
        elif not outcome.allowed:
            response = TemplateResponse(self.request, self.template_name, {"wrong_code": True}, status=401)
        else:
            auth_login(self.request, outcome.user, backend=_BACKEND)
            change = get_settings().password_change_url
            target = change if outcome.password_breached and change else settings.LOGIN_REDIRECT_URL
            response = HttpResponseRedirect(resolve_url(target))
            set_device_cookie(self.request, response)
        response["Cache-Control"] = "no-store"
        return response


def password_reset_request(request: HttpRequest, identifier: str) -> ResetOutcome:
    """Counts a reset request for ``identifier`` (known or not) with
    ``RecordFlowAttempt(FLOW_PASSWORD_RESET)`` and the client key. Send the mail only
    when ``send_mail`` *and* the account exists, and answer with the same page either
    way; ``retryable`` (the daemon could not answer) is the same for every name."""
    conf = get_settings()
    try:
        answer = get_client().password_reset_request(conf.realm, identifier, client_key=client_key(request, conf))
        outcome = ResetOutcome(send_mail=answer.allowed, retryable=answer.retryable)
    except Exception as e:  # noqa: BLE001 - fail closed
        log.error("portcullis: the reset check failed in this process (%s): no mail", type(e).__name__)
        outcome = ResetOutcome(send_mail=False, retryable=True)
    try:
        reset_outcome.send(sender=None, request=request, outcome=outcome)
    except Exception as e:  # noqa: BLE001 - a receiver's error sends no mail
        log.error("portcullis: a reset_outcome receiver failed (%s)", type(e).__name__)
        return ResetOutcome(send_mail=False, retryable=outcome.retryable)
    return outcome


def _queued_send_mail(queue: Callable[[Any], None]) -> Callable[..., None]:
    """A ``PasswordResetForm.send_mail`` that builds the message as Django's does and
    hands it to ``queue`` instead of sending it."""

    def send_mail(
        subject_template_name: str,
        email_template_name: str,
        context: dict[str, Any],
        from_email: str | None,
        to_email: str,
        html_email_template_name: str | None = None,
    ) -> None:
        subject = "".join(loader.render_to_string(subject_template_name, context).splitlines())
        body = loader.render_to_string(email_template_name, context)
        message = EmailMultiAlternatives(subject, body, from_email, [to_email])
        if html_email_template_name is not None:
            message.attach_alternative(loader.render_to_string(html_email_template_name, context), "text/html")
        try:
            queue(message)
        except Exception as e:  # noqa: BLE001 - as Django's own: the page is the same, no mail
            log.error("portcullis: RESET_MAIL_QUEUE failed (%s): the reset mail is lost", type(e).__name__)

    return send_mail


class PasswordResetView(auth_views.PasswordResetView):
    """Django's ``PasswordResetView`` behind :func:`password_reset_request`: the mail
    goes out (Django sends it only to an address that has an account) only on the
    daemon's allow; every address gets the same redirect to the "done" page, and 503
    (``portcullis/unavailable.html``) only when the daemon cannot answer.

    Django's form sends the mail inline, so a known address's page waits for the mail
    server and an unknown one's does not: the time tells which addresses have accounts.
    Give the site an ``EMAIL_BACKEND`` that queues, or set ``PORTCULLIS["RESET_MAIL_QUEUE"]``
    to a ``queue(message)`` that takes the ready ``EmailMultiAlternatives`` to send later."""

    def form_valid(self, form: Any) -> HttpResponse:
        """Counts the request, then sends (or queues) the mail, or not, and redirects."""
        outcome = password_reset_request(self.request, form.cleaned_data["email"])
        if outcome.retryable:
            return _page(self.request, Kind.UNAVAILABLE)
        if outcome.send_mail:
            queue = get_settings().reset_mail_queue
            if queue is not None:
                form.send_mail = _queued_send_mail(queue)
            response: HttpResponse = super().form_valid(form)
            return response
        return HttpResponseRedirect(self.get_success_url())
