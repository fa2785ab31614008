"""The Django integration's settings and system checks: every bad setting is
ImproperlyConfigured naming it, a password backend beside PortcullisBackend is an error,
and the client key follows the trusted proxy setting."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    "bad, named",
    [
        ([], "PORTCULLIS must be a dict"),
        ({"REALMS": "x"}, 'PORTCULLIS["REALMS"] is not a setting'),
        ({"REALM": ""}, 'PORTCULLIS["REALM"]'),
        ({"STEP_UP": "yes"}, 'PORTCULLIS["STEP_UP"]'),
        ({"ENDPOINTS": "http://127.0.0.1:50051"}, 'PORTCULLIS["ENDPOINTS"]'),
        ({"ENDPOINTS": ["127.0.0.1:50051"]}, "endpoints[0]"),
        ({"CLIENT": {"call_timeout": 0}}, "call_timeout"),
        ({"CLIENT": {"timeout": 2}}, 'PORTCULLIS["CLIENT"] takes only ClientConfig fields'),
        ({"CLIENT": {"endpoints": ["http://x:1"]}}, 'PORTCULLIS["CLIENT"]'),
        ({"DEVICE_COOKIE_NAME": "bad name;"}, 'PORTCULLIS["DEVICE_COOKIE_NAME"]'),
        ({"DEVICE_COOKIE_MAX_AGE": 10}, 'PORTCULLIS["DEVICE_COOKIE_MAX_AGE"]'),
        ({"TRUSTED_PROXY_HEADER": "X-Forwarded-For", "TRUSTED_PROXY_HOPS": 0}, 'PORTCULLIS["TRUSTED_PROXY_HOPS"]'),
        ({"SECOND_FACTOR_ON_SIGNALS": 1}, 'PORTCULLIS["SECOND_FACTOR_ON_SIGNALS"]'),
        ({"CHECK_CODE": "no.such.module.check"}, 'PORTCULLIS["CHECK_CODE"]'),
        ({"CHECK_CODE": 42}, 'PORTCULLIS["CHECK_CODE"]'),
        ({"RESET_MAIL_QUEUE": "no.such.module.queue"}, 'PORTCULLIS["RESET_MAIL_QUEUE"]'),
        ({"RESET_MAIL_QUEUE": []}, 'PORTCULLIS["RESET_MAIL_QUEUE"] must be a function queue(message)'),
    ],
)
def test_a_bad_setting_is_improperly_configured_naming_it(django_site, bad, named: str) -> None:
    from django.core.exceptions import ImproperlyConfigured

    from portcullis_client.django.conf import load

    with pytest.raises(ImproperlyConfigured) as raised:
        load(bad)
    assert named in str(raised.value)


def test_the_system_checks_refuse_a_password_backend_beside_portcullis(django_site) -> None:
    from django.conf import settings
    from django.test import override_settings

    from portcullis_client.django.checks import check_portcullis

    assert check_portcullis() == []
    backends = [*settings.AUTHENTICATION_BACKENDS, "django.contrib.auth.backends.ModelBackend"]
    with override_settings(AUTHENTICATION_BACKENDS=backends):
        assert [m.id for m in check_portcullis()] == ["portcullis.E002"]
    with override_settings(AUTHENTICATION_BACKENDS=["django.contrib.auth.backends.ModelBackend"]):
        assert sorted(m.id for m in check_portcullis()) == ["portcullis.E002", "portcullis.W001"]
    with override_settings(PORTCULLIS={"STEP_UP": "yes"}):
        messages = check_portcullis()
        assert [m.id for m in messages] == ["portcullis.E001"] and 'PORTCULLIS["STEP_UP"]' in messages[0].msg


def test_the_client_key_is_remote_addr_or_the_trusted_proxy_headers_entry(django_site) -> None:
    from django.test import RequestFactory

    from portcullis_client.django.conf import load
    from portcullis_client.django.http import client_key

    request = RequestFactory().get("/", REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.9, 198.51.100.2")
    assert client_key(request, load({})) == "10.0.0.1"
    behind_one = load({"TRUSTED_PROXY_HEADER": "X-Forwarded-For"})
    assert client_key(request, behind_one) == "198.51.100.2"
    behind_two = load({"TRUSTED_PROXY_HEADER": "X-Forwarded-For", "TRUSTED_PROXY_HOPS": 2})
    assert client_key(request, behind_two) == "203.0.113.9"


def test_the_device_cookie_name_is_keyed_with_the_secret_key(django_site) -> None:
    import hashlib

    from django.test import override_settings

    from portcullis_client.django.conf import load
    from portcullis_client.django.http import device_cookie_name

    conf = load({"REALM": "django"})
    name = device_cookie_name(conf, " Alice@Example.com ")
    prefix = "__Host-portcullis-device-"
    assert name.startswith(prefix) and len(name) == len(prefix) + 16
    assert name == device_cookie_name(conf, "alice@example.com")  # trimmed, lowercased
    # Not a digest anyone can compute from a guessed address (a dictionary over the
    # Cookie headers one sees): keyed with SECRET_KEY, and renamed with it.
    assert name != prefix + hashlib.sha256(b"django\0alice@example.com").hexdigest()[:16]
    with override_settings(SECRET_KEY="another-key-for-this-test-only-not-a-secret"):
        assert device_cookie_name(conf, "alice@example.com") != name
    assert device_cookie_name(load({"REALM": "stepup"}), "alice@example.com") != name


def test_a_forked_child_gets_the_settings_lock_back_unlocked(django_site) -> None:
    import os
    import signal
    import threading

    from portcullis_client.django import conf

    # Another thread of the parent holds the lock at fork() (gunicorn --preload): the
    # child, which has no such thread, must still read its settings.
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with conf._lock:
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(5)
    try:
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            code = 1
            try:
                signal.alarm(5)  # a deadlock ends here, killed by SIGALRM
                conf.get_settings()
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
    finally:
        release.set()
        holder.join()
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
