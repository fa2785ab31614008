"""The Django integration in a real Django project (tests/django_project: Django's
default PBKDF2 hasher, sqlite in a temporary directory) against the real daemon, with
Django's test Client: right, wrong and unknown logins, a rehash, a lockout shared by two
Django processes, one reset page for every address, every daemon failure a refused
login that never raises, and no refused login let in by a ModelBackend listed after the
backend (nor by aauthenticate)."""

from __future__ import annotations

import itertools
import json
import logging
import os
import pathlib
import signal
import subprocess
import sys
import uuid

import pytest

from django_support import PASSWORD, masked, user

TESTS = pathlib.Path(__file__).resolve().parent
LOGIN = "/accounts/login/"
_addresses = itertools.count(1)


def name(what: str) -> str:
    return f"{what}-{uuid.uuid4().hex[:8]}"


def browser():
    """A browser of its own, from an address of its own (a network of its own too)."""
    from django.test import Client

    n = next(_addresses)
    return Client(REMOTE_ADDR=f"10.{n // 250}.{n % 250}.7")


def outcome(response):
    return getattr(response.wsgi_request, "portcullis_login", None)


def signed_in(b) -> bool:
    return "_auth_user_id" in b.session


def test_a_right_password_signs_in_and_sets_the_device_cookie(django_site) -> None:
    from portcullis_client.django.conf import get_settings
    from portcullis_client.django.http import device_cookie_name
    from portcullis_client.django.outcome import Kind

    u = user(name("right"))
    assert u.password.startswith("pbkdf2_sha256$1000000$")  # Django's default hasher
    b = browser()
    r = b.post(LOGIN, {"username": u.username, "password": PASSWORD})
    assert (r.status_code, r["Location"]) == (302, "/welcome/")
    assert outcome(r).kind is Kind.ALLOW and not outcome(r).rehashed
    assert b.get("/welcome/").content == f"welcome {u.username}".encode()
    cookie = r.cookies[device_cookie_name(get_settings(), u.username)]
    assert cookie.value and cookie["httponly"] and cookie["secure"] and cookie["samesite"] == "Lax"
    assert cookie["path"] == "/" and int(cookie["max-age"]) == 90 * 24 * 3600
    assert "no-store" in r["Cache-Control"]


def test_a_wrong_password_and_an_unknown_user_get_the_same_page(django_site) -> None:
    from django.contrib.auth import authenticate
    from django.test import RequestFactory

    from portcullis_client.django.outcome import Kind

    known, unknown = user(name("wrong")).username, name("nobody")
    pages = []
    for who in (known, unknown):
        b = browser()
        r = b.post(LOGIN, {"username": who, "password": "not the password"})
        assert outcome(r).kind is Kind.DENY and outcome(r).user is None
        assert not signed_in(b)
        pages.append((r.status_code, r["Content-Type"], masked(r.content).replace(who.encode(), b"-")))
    assert pages[0] == pages[1]
    assert pages[0][0] == 200 and b"Please enter a correct username and password" in pages[0][2]
    request = RequestFactory().post(LOGIN, REMOTE_ADDR="10.250.0.1")
    assert authenticate(request, username=known, password="not the password either") is None


def test_a_hash_below_the_target_is_rehashed_with_djangos_hasher(django_site) -> None:
    from django.contrib.auth.hashers import PBKDF2PasswordHasher

    u = user(name("rehash"))
    u.password = PBKDF2PasswordHasher().encode(PASSWORD, "legacysalt1234", iterations=100_000)
    u.save()
    b = browser()
    r = b.post(LOGIN, {"username": u.username, "password": PASSWORD})
    assert r.status_code == 302 and signed_in(b) and outcome(r).rehashed
    u.refresh_from_db()
    assert u.password.startswith("pbkdf2_sha256$1000000$") and u.check_password(PASSWORD)
    # The new hash logs in without a rehash.
    r = browser().post(LOGIN, {"username": u.username, "password": PASSWORD})
    assert r.status_code == 302 and not outcome(r).rehashed


def test_a_realm_target_django_does_not_write_never_rehashes_and_warns_once(django_site, caplog, monkeypatch) -> None:
    from django.conf import settings
    from django.test import override_settings

    from portcullis_client.django import backend
    from portcullis_client.django.conf import get_settings
    from portcullis_client.django.http import device_cookie_name

    # The realm keeps the daemon's default target (argon2id); Django writes PBKDF2. The
    # daemon asks for a rehash on every accept, and Django would write PBKDF2 again.
    monkeypatch.setattr(backend, "_warned_target", False)
    u = user(name("argon2target"))
    stored = u.password
    caplog.set_level(logging.WARNING, logger="portcullis_client.django")
    with override_settings(PORTCULLIS=dict(settings.PORTCULLIS, REALM="argon2default")):
        for _ in range(2):
            b = browser()
            r = b.post(LOGIN, {"username": u.username, "password": PASSWORD})
            assert r.status_code == 302 and signed_in(b)
            assert outcome(r).answer.needs_rehash and not outcome(r).rehashed
            # No rehash, so the device token is kept: the cookie is set.
            assert r.cookies[device_cookie_name(get_settings(), u.username)].value
            u.refresh_from_db()
            assert u.password == stored
    warnings = [rec for rec in caplog.records if "hash target does not match" in rec.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    assert u.username not in caplog.text and stored not in caplog.text
    assert "pbkdf2_iterations = 1000000" in warnings[0].getMessage()


def test_a_stored_hash_the_daemon_refuses_gets_an_unknown_users_page_and_count(django_site, caplog) -> None:
    from django.contrib.auth.hashers import MD5PasswordHasher

    from portcullis_client.django.outcome import Kind

    # A site upgraded from an old Django still holds md5$ hashes, which the daemon
    # refuses (INVALID_ARGUMENT, at once, uncounted): that must not tell the account
    # from an unknown one, by the page, the count or the CAPTCHA.
    legacy = user(name("md5"))
    legacy.password = MD5PasswordHasher().encode(PASSWORD, "legacysalt1234")
    legacy.save()
    caplog.set_level(logging.ERROR, logger="portcullis_client.django")
    seen = {}
    unknown = name("nobody")
    for who in (legacy.username, unknown):
        pages = []
        for password in ("wrong one", "wrong two", PASSWORD):  # the right one last: no way in
            b = browser()
            r = b.post(LOGIN, {"username": who, "password": password})
            assert not signed_in(b) and outcome(r).user is None
            pages.append((r.status_code, outcome(r).kind, masked(r.content).replace(who.encode(), b"-")))
        seen[who] = (pages, django_site.inspect("django", who).failures)
    assert seen[legacy.username] == seen[unknown]
    pages, failures = seen[legacy.username]
    assert failures == 3  # counted, as an unknown user's
    assert pages[0][1] is Kind.DENY and pages[2][1] is Kind.CAPTCHA  # the third reaches the CAPTCHA
    errors = [rec for rec in caplog.records if "stored hash the daemon cannot verify" in rec.getMessage()]
    assert len(errors) == 3 and all(rec.levelno == logging.ERROR for rec in errors)
    assert legacy.username not in caplog.text and legacy.password not in caplog.text


def worker(remote_addr: str, username: str, *passwords: str) -> list[dict]:
    """Another Django process (tests/django_worker.py) on the same database and daemon."""
    env = dict(os.environ, PYTHONPATH=str(TESTS))
    out = subprocess.run(
        [sys.executable, str(TESTS / "django_worker.py"), remote_addr, username, *passwords],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    return [json.loads(line) for line in out.stdout.splitlines()]


def test_a_lockout_is_shared_by_two_django_processes(django_site) -> None:
    target, other = user(name("locked")), user(name("open"))
    first = worker("198.51.100.31", target.username, *(f"guess-{i}" for i in range(5)))
    assert [a["signed_in"] for a in first] == [False] * 5
    assert {a["kind"] for a in first} <= {"deny", "captcha"}
    assert django_site.inspect("django", target.username).failures == 5
    # Another Django process, another address: the right password is refused, because
    # the lockout is the daemon's, not the first process's.
    second = worker("203.0.113.77", target.username, PASSWORD)
    assert second[0]["signed_in"] is False and second[0]["kind"] in ("deny", "captcha")
    assert second[0]["pid"] != first[0]["pid"]
    # The same second process signs in to an account that is not locked.
    control = worker("203.0.113.77", other.username, PASSWORD)
    assert control[0]["signed_in"] is True and control[0]["kind"] == "allow"


def test_the_reset_page_is_the_same_for_known_and_unknown_addresses(django_site) -> None:
    from django.core import mail

    u = user(name("reset"))
    mail.outbox = []
    pages = []
    for email in (u.email, f"{name('nobody')}@example.com", u.email):
        r = browser().post("/accounts/password_reset/", {"email": email})
        pages.append((r.status_code, r["Location"], r.content))
    # The known address, an unknown one, and the known one again inside the daemon's
    # interval (counted, denied, no mail): one page.
    assert pages[0] == pages[1] == pages[2] == (302, "/accounts/password_reset/done/", b"")
    assert [m.to for m in mail.outbox] == [[u.email]]



def test_the_reset_mail_goes_to_the_sites_queue_when_one_is_set(django_site) -> None:
    from django.conf import settings
    from django.core import mail
    from django.test import override_settings

    u = user(name("queued"))
    mail.outbox, queued = [], []
    with override_settings(PORTCULLIS=dict(settings.PORTCULLIS, RESET_MAIL_QUEUE=queued.append)):
        for email in (u.email, f"{name('nobody')}@example.com"):
            r = browser().post("/accounts/password_reset/", {"email": email})
            assert (r.status_code, r["Location"]) == (302, "/accounts/password_reset/done/")
    # Nothing sent inline; the known address's mail, as Django's form builds it, queued.
    assert mail.outbox == [] and [m.to for m in queued] == [[u.email]]
    assert "Reset your password: http://testserver/accounts/reset/" in queued[0].body


@pytest.fixture
def frozen_daemon(tmp_path):
    """A daemon stopped with SIGSTOP: its socket open, nothing answering."""
    from daemon import Daemon
    from django_support import DAEMON_CONFIG

    d = Daemon(tmp_path / "frozen", DAEMON_CONFIG)
    d.freeze()
    yield d
    d.proc.send_signal(signal.SIGCONT)
    d.kill()
    d.stop()


def failing_settings(failure: str, request) -> dict:
    """``PORTCULLIS`` pointing at a daemon that fails in the way ``failure`` names."""
    from django.conf import settings
    from faults import AnswerEndpoint, ClosedPort

    base = dict(settings.PORTCULLIS, CLIENT={"call_timeout": 1.0})
    if failure == "unreachable":
        port = ClosedPort()
        request.addfinalizer(port.close)
        return dict(base, ENDPOINTS=[port.url])
    if failure == "frozen":
        return dict(base, ENDPOINTS=[request.getfixturevalue("frozen_daemon").url])
    if failure == "a realm the daemon does not know":
        return dict(base, REALM="no-such-realm")
    if failure in ("an error status", "an accept for an unknown account", "an unknown verdict"):
        answer = {"an accept for an unknown account": {"verdict": 1, "device_token": "forged"}, "an unknown verdict": {"verdict": 99}}
        endpoint = AnswerEndpoint(status=13) if failure == "an error status" else AnswerEndpoint(answer=answer[failure])
        request.addfinalizer(endpoint.close)
        return dict(base, ENDPOINTS=[endpoint.url])
    if failure == "a broken configuration":
        return dict(base, CLIENT={"call_timeout": -1})
    raise ValueError(failure)


FAILURES = [
    "unreachable",
    "frozen",
    "a realm the daemon does not know",
    "an error status",
    "an unknown verdict",
    "an accept for an unknown account",
    "a broken configuration",
]


@pytest.mark.parametrize("failure", FAILURES)
def test_every_daemon_failure_is_a_refused_login_that_never_raises(django_site, failure: str, request) -> None:
    from django.contrib.auth import authenticate
    from django.test import RequestFactory, override_settings

    # A real user and the right password: only the daemon's failure can refuse it (the
    # forged accept names an account that does not exist).
    who = name("unknown") if failure == "an accept for an unknown account" else user(name("failure")).username
    with override_settings(PORTCULLIS=failing_settings(failure, request)):
        b = browser()
        r = b.post(LOGIN, {"username": who, "password": PASSWORD})
        direct = authenticate(RequestFactory().post(LOGIN, REMOTE_ADDR="10.250.0.2"), username=who, password=PASSWORD)
    assert direct is None
    assert not signed_in(b)
    assert not any(name.startswith("__Host-portcullis-device") for name in r.cookies)
    if failure in ("unreachable", "frozen", "a broken configuration"):
        # Nothing answered (or this process could not ask): 503, try again shortly.
        assert (r.status_code, r["Retry-After"]) == (503, "1")
        assert b"Try again shortly" in r.content
    else:
        # The daemon answered something that is no accept: the one failure page.
        assert r.status_code == 200 and b"Please enter a correct username and password" in r.content


MODEL_BACKEND_AFTER = [
    "portcullis_client.django.backend.PortcullisBackend",
    "django.contrib.auth.backends.ModelBackend",
]


@pytest.mark.parametrize("refusal", ["the daemon down", "a locked account"])
def test_a_refused_login_never_falls_through_to_a_model_backend_listed_after(
    django_site, refusal: str, request
) -> None:
    from asgiref.sync import async_to_sync
    from django.conf import settings
    from django.contrib.auth import aauthenticate, authenticate
    from django.contrib.auth.signals import user_login_failed
    from django.test import RequestFactory, override_settings

    from portcullis_client.django.outcome import Kind

    # The misconfiguration portcullis.E002 names, where checks do not run (gunicorn, the
    # test Client): ModelBackend after PortcullisBackend would compare the right
    # password itself and sign the user in on every refusal.
    u = user(name("fallthrough"))
    portcullis = failing_settings("unreachable", request) if refusal == "the daemon down" else settings.PORTCULLIS
    if refusal == "a locked account":
        for i in range(5):
            browser().post(LOGIN, {"username": u.username, "password": f"guess-{i}"})
        assert django_site.inspect("django", u.username).failures == 5
    failed: list = []

    def receiver(sender, credentials, request=None, **kwargs) -> None:
        failed.append(credentials["username"])

    user_login_failed.connect(receiver)
    try:
        with override_settings(AUTHENTICATION_BACKENDS=MODEL_BACKEND_AFTER, PORTCULLIS=portcullis):
            b = browser()
            r = b.post(LOGIN, {"username": u.username, "password": PASSWORD})
            direct_request = RequestFactory().post(LOGIN, REMOTE_ADDR="10.250.0.3")
            direct = authenticate(direct_request, username=u.username, password=PASSWORD)
            via_async = async_to_sync(aauthenticate)(direct_request, username=u.username, password=PASSWORD)
            # Without a request the daemon cannot be asked (no client key): refused too.
            no_request = authenticate(username=u.username, password=PASSWORD)
    finally:
        user_login_failed.disconnect(receiver)
    assert not signed_in(b)
    assert direct is None and via_async is None and no_request is None
    assert failed == [u.username] * 4  # Django's own "login failed", each time
    assert not any(n.startswith("__Host-portcullis-device") for n in r.cookies)
    # The login view still answers from the outcome the backend left on the request.
    if refusal == "the daemon down":
        assert outcome(r).kind is Kind.UNAVAILABLE and direct_request.portcullis_login.kind is Kind.UNAVAILABLE
        assert (r.status_code, r["Retry-After"]) == (503, "1") and b"Try again shortly" in r.content
    else:
        assert outcome(r).kind in (Kind.DENY, Kind.CAPTCHA) and outcome(r).user is None
        assert r.status_code in (200, 401) and "no-store" in r["Cache-Control"]


def test_aauthenticate_asks_the_daemon(django_site) -> None:
    from asgiref.sync import async_to_sync
    from django.contrib.auth import aauthenticate
    from django.test import RequestFactory

    from portcullis_client.django.outcome import Kind

    # ModelBackend's own aauthenticate (Django 5.2) compares the password in-process:
    # the backend's must be its authenticate, counted by the daemon.
    u = user(name("async"))
    request = RequestFactory().post(LOGIN, REMOTE_ADDR="10.250.0.4")
    assert async_to_sync(aauthenticate)(request, username=u.username, password=PASSWORD) == u
    assert request.portcullis_login.kind is Kind.ALLOW
    request = RequestFactory().post(LOGIN, REMOTE_ADDR="10.250.0.4")
    assert async_to_sync(aauthenticate)(request, username=u.username, password="not the password") is None
    assert request.portcullis_login.kind is Kind.DENY
    assert django_site.inspect("django", u.username).failures == 1
