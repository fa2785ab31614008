"""The Django integration in a ``step_up`` realm (``unknown_device = "step_up"``, the
site's ``PORTCULLIS["STEP_UP"]``): one challenge page for a right password from a new
browser and for every other refused login (docs/devices.md, "No checker"), a code only
for the first, and the code step that confirms the device, against the real daemon."""

from __future__ import annotations

import itertools
import uuid

import pytest

from django_support import PASSWORD, masked, user

LOGIN = "/accounts/login/"
CODE = "/accounts/login/code/"
_addresses = itertools.count(1)


@pytest.fixture
def stepup(django_site):
    from django.conf import settings
    from django.test import override_settings

    from portcullis_client.django.outcome import login_outcome

    sent: list = []

    def receiver(sender, request, outcome, **kwargs) -> None:
        sent.append(outcome)

    login_outcome.connect(receiver)
    with override_settings(PORTCULLIS=dict(settings.PORTCULLIS, REALM="stepup", STEP_UP=True)):
        yield sent
    login_outcome.disconnect(receiver)


def browser():
    from django.test import Client

    n = next(_addresses)
    return Client(REMOTE_ADDR=f"10.200.{n % 250}.9")


def page(response, who: str) -> tuple:
    """What the end user sees: status, the headers a page differs by, and the body
    without the per-request CSRF token and the name typed."""
    body = masked(response.content).replace(who.encode(), b"-")
    return response.status_code, response["Content-Type"], response.get("Cache-Control"), body


def test_one_challenge_page_for_a_right_password_and_every_refused_login(stepup) -> None:
    from portcullis_client.django.outcome import Kind

    u = user(f"stepup-{uuid.uuid4().hex[:8]}")
    attempts = [
        ("a right password, new browser", u.username, {"password": PASSWORD}),
        ("a wrong password", u.username, {"password": "not the password"}),
        ("an unknown account", f"nobody-{uuid.uuid4().hex[:8]}", {"password": PASSWORD}),
        ("no password at all", u.username, {}),
    ]
    pages = []
    for _what, who, form in attempts:
        b = browser()
        r = b.post(LOGIN, {"username": who, **form})
        assert "_auth_user_id" not in b.session
        pages.append(page(r, who))
    assert all(p == pages[0] for p in pages), "the challenge page differs"
    assert pages[0][0] == 200 and b"We sent a code" in pages[0][3]
    # The daemon told them apart; only the real challenge sends a code.
    kinds = [(o.kind, o.send_code, o.user is not None) for o in stepup]
    assert kinds[0] == (Kind.CHALLENGE, True, True)
    # (The form without a password never reaches the backend: Django stops it first.)
    assert kinds[1:] == [(Kind.CHALLENGE, False, False)] * 2


def test_the_code_step_confirms_the_device_and_a_wrong_password_never_gets_in(stepup) -> None:
    from django_project.codes import CODES

    from portcullis_client.django.conf import get_settings
    from portcullis_client.django.http import device_cookie_name

    u = user(f"code-{uuid.uuid4().hex[:8]}")
    CODES[u.username] = "246810"
    # A wrong password's challenge page: the right code does not complete it.
    checker = browser()
    checker.post(LOGIN, {"username": u.username, "password": "not the password"})
    r = checker.post(CODE, {"code": "246810"})
    assert r.status_code == 401 and "_auth_user_id" not in checker.session
    # The right password's: a wrong code, then the right one signs in and sets the device cookie.
    owner = browser()
    owner.post(LOGIN, {"username": u.username, "password": PASSWORD})
    assert owner.post(CODE, {"code": "000000"}).status_code == 401
    r = owner.post(CODE, {"code": "246810"})
    assert (r.status_code, r["Location"]) == (302, "/welcome/")
    assert owner.get("/welcome/").content == f"welcome {u.username}".encode()
    cookie = r.cookies[device_cookie_name(get_settings(), u.username)]
    assert cookie.value and cookie["httponly"] and cookie["secure"] and cookie["samesite"] == "Lax"
    # The same browser next time (its session gone, its device cookie kept) signs in
    # straight away; another browser is challenged again.
    returning = browser()
    returning.cookies[cookie.key] = cookie.value
    r = returning.post(LOGIN, {"username": u.username, "password": PASSWORD})
    assert (r.status_code, r["Location"]) == (302, "/welcome/") and "_auth_user_id" in returning.session
    assert browser().post(LOGIN, {"username": u.username, "password": PASSWORD}).status_code == 200
    # The code step is used up: posting the code again signs no one in.
    again = browser()
    assert again.post(CODE, {"code": "246810"}).status_code == 302  # to the login page
    assert "_auth_user_id" not in again.session


def test_each_wrong_passwords_page_has_fresh_tries_as_the_right_ones_does(stepup, django_site) -> None:
    from django_project.codes import CODES

    u = user(f"decoy-{uuid.uuid4().hex[:8]}")
    CODES[u.username] = "135790"
    # A checker spends a wrong password's page's tries...
    spent = browser()
    spent.post(LOGIN, {"username": u.username, "password": "not the password"})
    assert [spent.post(CODE, {"code": "000000"}).status_code for _ in range(6)] == [401] * 5 + [429]
    # ...then tries one code on each guess's page: a wrong password's answers as the
    # right password's does (before, the spent decoy answered 429 for every wrong one).
    wrong, right = browser(), browser()
    wrong.post(LOGIN, {"username": u.username, "password": "not it either"})
    right.post(LOGIN, {"username": u.username, "password": PASSWORD})
    pages = [page(b.post(CODE, {"code": "000000"}), u.username) for b in (wrong, right)]
    assert pages[0] == pages[1] and pages[0][0] == 401
    # The decoys never touched the account's own code record: only the right page's code.
    assert django_site.inspect("stepup", u.username, flow=1).failures == 1


def test_the_code_view_is_csrf_protected_and_hides_its_post_without_the_middleware(django_site) -> None:
    from django.conf import settings
    from django.test import Client, override_settings

    # Like Django's LoginView: protected by the view itself, not only by a site's
    # CsrfViewMiddleware, and its POST (the code) kept out of error reports.
    without = [m for m in settings.MIDDLEWARE if m != "django.middleware.csrf.CsrfViewMiddleware"]
    with override_settings(MIDDLEWARE=without):
        strict = Client(enforce_csrf_checks=True, REMOTE_ADDR="10.201.0.9")
        assert strict.post(CODE, {"code": "123456"}).status_code == 403
        assert strict.post(LOGIN, {"username": "x", "password": "y"}).status_code == 403
    r = browser().post(CODE, {"code": "123456"})
    assert r.status_code == 302 and r.wsgi_request.sensitive_post_parameters == "__ALL__"
