"""The integration's settings: one ``PORTCULLIS`` dict in the site's settings module,
checked when first read (every key, its type and range; an unknown key too), and the one
:class:`~portcullis_client.Client` of this process that they configure.

A bad setting raises ``ImproperlyConfigured`` naming it (``PORTCULLIS["REALM"] ...``),
never a value that could be a secret.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

from .._config import ClientConfig, ConfigError
from .._process import Lock
from .._sync import Client

__all__ = ["PortcullisSettings", "get_client", "get_settings"]

#: Ninety days: the daemon's default ``device_token_ttl``.
_DEVICE_COOKIE_MAX_AGE = 90 * 24 * 3600


@dataclass(frozen=True)
class PortcullisSettings:
    """``settings.PORTCULLIS``, checked. Durations in seconds."""

    #: Daemon URLs (``http://HOST:PORT``, or ``https://`` with ``CLIENT["tls"]``).
    endpoints: tuple[str, ...]
    #: Further :class:`~portcullis_client.ClientConfig` fields (``call_timeout``, ``tls``,
    #: ``token_file``, ``keepalive_time``, ...).
    client: dict[str, Any]
    #: The daemon's realm this site's accounts live in.
    realm: str
    #: The realm has ``unknown_device = "step_up"``: every refused login shows the one
    #: challenge page (docs/devices.md, "No checker").
    step_up: bool
    #: The device cookie's name; each account's cookie adds ``-`` and 16 hex digits.
    device_cookie_name: str
    #: The device cookie's ``Max-Age``.
    device_cookie_max_age: int
    #: A header your own proxies set (``X-Forwarded-For``), or ``None``: the client key
    #: is then ``REMOTE_ADDR``.
    trusted_proxy_header: str | None
    #: How many proxies of yours stand in front of Django (with ``trusted_proxy_header``).
    trusted_proxy_hops: int
    #: An accepted password whose answer asks for a second factor (``spray_suspected``,
    #: ``step_up``) logs no one in: the second-factor page instead.
    second_factor_on_signals: bool
    #: ``check_code(identifier, code) -> bool`` for the code step of a challenge, or ``None``.
    check_code: Callable[[str, str], bool] | None
    #: Where a login with a breached password goes after signing in, or ``None``.
    password_change_url: str | None
    #: ``queue(message)`` that takes a reset mail (a ready ``EmailMultiAlternatives``)
    #: to send later, instead of :class:`~portcullis_client.django.views.PasswordResetView`
    #: sending it inline; or ``None``.
    reset_mail_queue: Callable[[Any], None] | None

    def client_config(self) -> ClientConfig:
        """The client's configuration; ``ImproperlyConfigured`` naming a bad field."""
        try:
            return ClientConfig(endpoints=self.endpoints, **self.client)
        except ConfigError as e:
            raise ImproperlyConfigured(f'PORTCULLIS["CLIENT"] or PORTCULLIS["ENDPOINTS"]: {e}') from None
        except TypeError:
            fields = sorted(ClientConfig.__dataclass_fields__)
            raise ImproperlyConfigured(
                f'PORTCULLIS["CLIENT"] takes only ClientConfig fields: {", ".join(fields)}'
            ) from None


_KEYS = {
    "ENDPOINTS",
    "CLIENT",
    "REALM",
    "STEP_UP",
    "DEVICE_COOKIE_NAME",
    "DEVICE_COOKIE_MAX_AGE",
    "TRUSTED_PROXY_HEADER",
    "TRUSTED_PROXY_HOPS",
    "SECOND_FACTOR_ON_SIGNALS",
    "CHECK_CODE",
    "PASSWORD_CHANGE_URL",
    "RESET_MAIL_QUEUE",
}
_COOKIE_NAME_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _bad(key: str, what: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f'PORTCULLIS["{key}"] {what}')


def _str(raw: dict[str, Any], key: str, default: str | None, *, optional: bool = False) -> str | None:
    value = raw.get(key, default)
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise _bad(key, "must be a non-empty string")
    return value


def _bool(raw: dict[str, Any], key: str, default: bool) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise _bad(key, "must be True or False")
    return value


def _int(raw: dict[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = raw.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise _bad(key, f"must be an integer from {low} to {high}")
    return value


def _function(raw: dict[str, Any], key: str, what: str) -> Callable[..., Any] | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = import_string(value)
        except ImportError:
            raise _bad(key, "names nothing importable (write a dotted path to a function)") from None
    if not callable(value):
        raise _bad(key, f"must be a function {what}, or its dotted path")
    function: Callable[..., Any] = value
    return function


def load(raw: object) -> PortcullisSettings:
    """Checks ``raw`` (the value of ``settings.PORTCULLIS``) and returns it typed."""
    if not isinstance(raw, dict):
        raise ImproperlyConfigured("PORTCULLIS must be a dict (see portcullis_client.django)")
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise _bad(unknown[0], f"is not a setting; known: {', '.join(sorted(_KEYS))}")
    endpoints = raw.get("ENDPOINTS", ("http://127.0.0.1:50051",))
    if isinstance(endpoints, str) or not isinstance(endpoints, (list, tuple)) or not endpoints:
        raise _bad("ENDPOINTS", "must be a non-empty list of daemon URLs")
    client = raw.get("CLIENT", {})
    if not isinstance(client, dict) or "endpoints" in client:
        raise _bad("CLIENT", "must be a dict of ClientConfig fields other than endpoints")
    cookie = _str(raw, "DEVICE_COOKIE_NAME", "__Host-portcullis-device")
    assert cookie is not None
    if not set(cookie) <= _COOKIE_NAME_CHARS:
        raise _bad("DEVICE_COOKIE_NAME", "must be a cookie name (letters, digits and !#$%&'*+-.^_`|~)")
    header = _str(raw, "TRUSTED_PROXY_HEADER", None, optional=True)
    realm = _str(raw, "REALM", "default")
    assert realm is not None
    found = PortcullisSettings(
        endpoints=tuple(endpoints),
        client=dict(client),
        realm=realm,
        step_up=_bool(raw, "STEP_UP", False),
        device_cookie_name=cookie,
        device_cookie_max_age=_int(raw, "DEVICE_COOKIE_MAX_AGE", _DEVICE_COOKIE_MAX_AGE, 60, 400 * 24 * 3600),
        trusted_proxy_header=header,
        trusted_proxy_hops=_int(raw, "TRUSTED_PROXY_HOPS", 1, 1 if header else 0, 32),
        second_factor_on_signals=_bool(raw, "SECOND_FACTOR_ON_SIGNALS", True),
        check_code=_function(raw, "CHECK_CODE", "check_code(identifier, code) -> bool"),
        password_change_url=_str(raw, "PASSWORD_CHANGE_URL", None, optional=True),
        reset_mail_queue=_function(raw, "RESET_MAIL_QUEUE", "queue(message) -> None"),
    )
    found.client_config()  # the client's own checks, named
    return found


#: Fork safe: a forked child gets it back unlocked (see ``_process``).
_lock = Lock()
_settings: PortcullisSettings | None = None
_client: Client | None = None


def get_settings() -> PortcullisSettings:
    """``settings.PORTCULLIS``, checked once (again after a test changes it)."""
    global _settings
    with _lock:
        if _settings is None:
            _settings = load(getattr(settings, "PORTCULLIS", {}))
        return _settings


def get_client() -> Client:
    """The process's :class:`~portcullis_client.Client` (it builds its channels in each
    process that calls, so it may be made before a fork)."""
    global _client
    found = get_settings()
    with _lock:
        if _client is None:
            _client = Client(found.client_config())
        return _client


def _reset(*, setting: str, **_kwargs: object) -> None:
    """``override_settings(PORTCULLIS=...)`` in tests: read the settings again, and make
    a new client (the old one is closed)."""
    global _settings, _client
    if setting != "PORTCULLIS":
        return
    with _lock:
        old, _client, _settings = _client, None, None
    if old is not None:
        old.close()


setting_changed.connect(_reset, dispatch_uid="portcullis_client.django.conf")
