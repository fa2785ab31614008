"""The client key and the device cookie of a Django request.

The client key is ``REMOTE_ADDR``, or, with ``TRUSTED_PROXY_HEADER``, the entry of that
header ``TRUSTED_PROXY_HOPS - 1`` places from its right end
(:func:`~portcullis_client.client_key_from_forwarded`).

The device cookie is one per account a browser signed in to: ``DEVICE_COOKIE_NAME``,
``-`` and 16 hex digits of an HMAC-SHA-256 keyed with ``SECRET_KEY`` (Django's
``salted_hmac``) over the realm and the identifier (trimmed, lowercased), so the name
does not show the identifier, nor lets one who sees Cookie headers confirm a guessed
one; ``HttpOnly; Secure; SameSite=Lax; Path=/`` and ``DEVICE_COOKIE_MAX_AGE``. The
default name's ``__Host-`` prefix makes browsers refuse it from a subdomain or over
plain HTTP. A new ``SECRET_KEY`` renames every cookie: each browser is an unknown device
once (a challenge in a ``step_up`` realm, a new device elsewhere), never a weaker deny.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponseBase
from django.utils.crypto import salted_hmac

from ..client_key import client_key_from_forwarded
from .conf import PortcullisSettings, get_settings

__all__ = ["DeviceCookieMiddleware", "client_key", "device_cookie_name", "set_device_cookie"]

#: Where the backend leaves a device token for the response (name, token).
PENDING_ATTR = "_portcullis_device_cookie"


def client_key(request: HttpRequest, conf: PortcullisSettings) -> str:
    """The client key of ``request`` (see the module's text); ``""`` without a peer,
    which the daemon refuses (a deny)."""
    peer = str(request.META.get("REMOTE_ADDR") or "")
    if conf.trusted_proxy_header is None:
        return peer
    meta = "HTTP_" + conf.trusted_proxy_header.upper().replace("-", "_")
    return client_key_from_forwarded(peer, str(request.META.get(meta) or ""), conf.trusted_proxy_hops)


def device_cookie_name(conf: PortcullisSettings, identifier: str) -> str:
    """The device cookie's name for the account ``identifier`` names (keyed with
    ``SECRET_KEY``: see the module's text)."""
    account = (conf.realm + "\0" + identifier.strip().lower()).encode("utf-8", "replace")
    digest = salted_hmac("portcullis.device-cookie", account, algorithm="sha256")
    return f"{conf.device_cookie_name}-{digest.hexdigest()[:16]}"


def set_device_cookie(request: HttpRequest, response: HttpResponseBase) -> bool:
    """Sets the device cookie the backend left on ``request`` (after an accepted login
    or a confirmed device) on ``response``, once. ``True`` when it set one."""
    pending = getattr(request, PENDING_ATTR, None)
    if not pending:
        return False
    setattr(request, PENDING_ATTR, None)
    name, token = pending
    response.set_cookie(
        name,
        token,
        max_age=get_settings().device_cookie_max_age,
        path="/",
        secure=True,
        httponly=True,
        samesite="Lax",
    )
    # It carries a credential: no cache keeps the response.
    response["Cache-Control"] = "no-store"
    return True


class DeviceCookieMiddleware:
    """Sets the device cookie of an accepted login on the response, for a site whose own
    login view calls ``authenticate`` and ``login`` (the integration's views set it
    themselves). Put it after ``SessionMiddleware``."""

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> Any:
        response = self.get_response(request)
        set_device_cookie(request, response)
        return response
