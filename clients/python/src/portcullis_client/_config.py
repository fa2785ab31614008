"""The client's configuration (docs/client.md, "Configuration"): where the daemons are,
every deadline, the retry budget, passive health, TLS and the bearer token. The
defaults are the Rust client's; durations are in seconds."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import grpc

__all__ = ["ClientConfig", "ConfigError", "TlsConfig"]


class ConfigError(ValueError):
    """A configuration the client cannot use. Messages name the setting, never a secret."""


@dataclass(frozen=True)
class TlsConfig:
    """TLS to ``https://`` endpoints: ``ca_file`` is the CA the daemon's certificate
    chains to; ``cert_file`` and ``key_file`` the gateway's client certificate (mutual
    TLS); ``domain_name`` the name the daemon's certificate carries when it is not the
    endpoint's host."""

    ca_file: str
    cert_file: str | None = None
    key_file: str | None = None
    domain_name: str | None = None

    def __repr__(self) -> str:
        return (
            f"TlsConfig(ca_file={self.ca_file!r}, cert_file={self.cert_file!r}, "
            f"key_file={self.key_file!r}, domain_name={self.domain_name!r})"
        )


@dataclass(frozen=True)
class ClientConfig:
    """Where the daemons are and how to call them (durations in seconds). Every field is
    checked when the config is made: a bad one raises :class:`ConfigError` naming it."""

    #: Daemon URLs, ``http://host:port`` (or ``https://`` with ``tls``).
    endpoints: tuple[str, ...] = ("http://127.0.0.1:50051",)
    #: The whole call, retries included; each try sends the time left as ``grpc-timeout``.
    call_timeout: float = 2.0
    #: One TCP connect (grpc's minimum connect timeout).
    connect_timeout: float = 0.5
    #: Retries of one call after transport failures.
    max_retries: int = 2
    #: Retries as a fraction of calls, in the long run.
    retry_budget_ratio: float = 0.2
    #: Retries allowed in a burst beyond the ratio.
    retry_budget_reserve: int = 10
    #: Consecutive transport failures that eject an endpoint.
    eject_after: int = 3
    #: First ejection; doubles after every failed probe.
    eject_for: float = 5.0
    #: Longest ejection.
    eject_max: float = 60.0
    #: Seconds between HTTP/2 keepalive pings on each connection (``grpc.keepalive_time_ms``):
    #: a NAT or load balancer that silently drops an idle flow is found out within
    #: ``keepalive_time + keepalive_timeout`` instead of when the OS gives up, minutes later.
    #: A proxy in front of the daemon must permit pings at least this often.
    keepalive_time: float = 30.0
    #: Seconds a ping may go unanswered before the connection is closed as dead and the
    #: next call connects afresh (``grpc.keepalive_timeout_ms``).
    keepalive_timeout: float = 10.0
    #: Ping connections with no call in flight too (``grpc.keepalive_permit_without_calls``),
    #: so a quiet gateway's first login after a dropped flow does not meet a dead connection.
    keepalive_permit_without_calls: bool = True
    #: TLS to ``https://`` endpoints.
    tls: TlsConfig | None = None
    #: A file holding the gateway's bearer token, sent as ``authorization: Bearer …``.
    token_file: str | None = None
    #: Extra grpc channel options (name, value), after the client's own.
    channel_options: tuple[tuple[str, Any], ...] = field(default=())

    def __post_init__(self) -> None:
        endpoints = self.endpoints
        if isinstance(endpoints, str):
            endpoints = (endpoints,)
        object.__setattr__(self, "endpoints", tuple(endpoints))
        object.__setattr__(self, "channel_options", tuple(self.channel_options))
        self.validate()

    def validate(self) -> None:
        """Raises :class:`ConfigError` naming the first setting out of range."""
        if not self.endpoints:
            raise ConfigError("client.endpoints is empty")
        for index, url in enumerate(self.endpoints):
            _target(index, url, self.tls)

        def check(ok: bool, setting: str, allowed: str) -> None:
            if not ok:
                raise ConfigError(f"client.{setting} is out of range: allowed {allowed}")

        def seconds(value: object) -> float:
            return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan

        check(seconds(self.call_timeout) >= 0.001, "call_timeout", "at least 0.001 s")
        check(seconds(self.connect_timeout) >= 0.001, "connect_timeout", "at least 0.001 s")
        check(_int(self.max_retries) and 0 <= self.max_retries <= 10, "max_retries", "0–10")
        check(0.0 <= seconds(self.retry_budget_ratio) <= 1.0, "retry_budget_ratio", "0.0–1.0")
        check(_int(self.retry_budget_reserve) and self.retry_budget_reserve >= 0, "retry_budget_reserve", "0 or more")
        check(_int(self.eject_after) and self.eject_after >= 1, "eject_after", "at least 1")
        check(seconds(self.eject_for) >= 0.001, "eject_for", "at least 0.001 s")
        check(seconds(self.eject_max) >= self.eject_for, "eject_max", "at least eject_for")
        check(0.001 <= seconds(self.keepalive_time) <= 86400, "keepalive_time", "0.001–86400 s")
        check(0.001 <= seconds(self.keepalive_timeout) <= 86400, "keepalive_timeout", "0.001–86400 s")
        check(isinstance(self.keepalive_permit_without_calls, bool), "keepalive_permit_without_calls", "True or False")


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _target(index: int, url: str, tls: TlsConfig | None) -> tuple[str, bool]:
    """The grpc target (``host:port``) of an endpoint URL and whether it uses TLS."""
    bad = ConfigError(
        f"client.endpoints[{index}] is not a valid URL (write http://HOST:PORT, or https://HOST:PORT with tls)"
    )
    if not isinstance(url, str):
        raise bad
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise bad from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
        raise bad
    if parts.query or parts.fragment or parts.username or parts.password:
        raise bad
    secure = parts.scheme == "https"
    if secure and tls is None:
        raise ConfigError(f"client.endpoints[{index}] is https:// but client.tls is not set")
    host = parts.hostname
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    return f"{host}:{port if port is not None else (443 if secure else 80)}", secure


def channel_targets(config: ClientConfig) -> list[tuple[str, bool]]:
    """Each endpoint's grpc target and whether it uses TLS, in configuration order."""
    return [_target(i, url, config.tls) for i, url in enumerate(config.endpoints)]


def channel_options(config: ClientConfig) -> list[tuple[str, Any]]:
    """The grpc channel options of every channel the client makes, then
    ``config.channel_options``."""
    connect_ms = max(1, int(config.connect_timeout * 1000))
    options: list[tuple[str, Any]] = [
        # This client decides what is retried (transport failures only, with the same
        # attempt_id, within the budget); grpc's own retries are off.
        ("grpc.enable_retries", 0),
        # grpc's connect deadline is max(min_reconnect_backoff, current backoff).
        ("grpc.min_reconnect_backoff_ms", connect_ms),
        ("grpc.initial_reconnect_backoff_ms", connect_ms),
        # A probe after an ejection must find the connection being retried.
        ("grpc.max_reconnect_backoff_ms", max(connect_ms, int(config.eject_for * 1000))),
        # Each client keeps its own connections (and so its own health).
        ("grpc.use_local_subchannel_pool", 1),
        # Keepalive: a connection whose pings go unanswered is closed, so calls stop
        # meeting a flow that a NAT or load balancer dropped without a word.
        ("grpc.keepalive_time_ms", max(1, int(config.keepalive_time * 1000))),
        ("grpc.keepalive_timeout_ms", max(1, int(config.keepalive_timeout * 1000))),
        # grpc spaces pings at least 1 s apart; a keepalive ping that had to wait behind
        # another ping is timed by the generic ping timeout (60 s by default) instead of
        # keepalive_timeout. The same value for both keeps the bound.
        ("grpc.http2.ping_timeout_ms", max(1, int(config.keepalive_timeout * 1000))),
        ("grpc.keepalive_permit_without_calls", 1 if config.keepalive_permit_without_calls else 0),
        # No cap on pings sent while no data flows (grpc's default stops after two).
        ("grpc.http2.max_pings_without_data", 0),
    ]
    if config.tls is not None and config.tls.domain_name:
        options.append(("grpc.ssl_target_name_override", config.tls.domain_name))
    options.extend(config.channel_options)
    return options


def channel_credentials(config: ClientConfig) -> grpc.ChannelCredentials | None:
    """TLS credentials for ``https://`` endpoints (``None`` without ``tls``). Raises
    :class:`ConfigError` naming a file that cannot be read."""
    tls = config.tls
    if tls is None:
        return None

    def read(setting: str, path: str) -> bytes:
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as e:
            raise ConfigError(f"client.{setting} could not be used: {e.strerror}") from None

    root = read("tls.ca_file", tls.ca_file)
    if (tls.cert_file is None) != (tls.key_file is None):
        raise ConfigError("client.tls.cert_file could not be used: cert_file and key_file go together")
    key = chain = None
    if tls.cert_file is not None and tls.key_file is not None:
        chain = read("tls.cert_file", tls.cert_file)
        key = read("tls.key_file", tls.key_file)
    return grpc.ssl_channel_credentials(root_certificates=root, private_key=key, certificate_chain=chain)


def bearer_metadata(config: ClientConfig) -> tuple[tuple[str, str], ...]:
    """The ``authorization`` metadata from ``token_file`` (empty without one). Raises
    :class:`ConfigError` when the file cannot be read or holds no usable token."""
    if config.token_file is None:
        return ()
    try:
        with open(os.fspath(config.token_file), encoding="utf-8") as f:
            token = f.read()
    except (OSError, UnicodeDecodeError):
        raise ConfigError("client.token_file could not be used (unreadable)") from None
    token = token.rstrip("\r\n")
    if not token or not all(0x21 <= ord(c) <= 0x7E for c in token):
        raise ConfigError("client.token_file is not a usable token (one line of visible ASCII)")
    return (("authorization", f"Bearer {token}"),)
