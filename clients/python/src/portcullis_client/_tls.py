"""Why a TLS connection to the daemon failed, in words a developer or an operator can act
on (``"TLS handshake refused: …"``), for a transport failure on an ``https://`` endpoint.

In TLS 1.3 the daemon checks the client certificate *after* the client considers the
handshake finished. A certificate it refuses (expired, from another CA, without the
clientAuth extended key usage, X.509 v1, none at all) comes back as a TLS alert on the
client's first read, and grpc core reports only ``Unwrap failed (TSI_DATA_CORRUPTED)``:
the alert's name goes to grpc's own stderr log, not into the status. So after such a
failure the client makes one diagnostic handshake of its own with the same files
(:func:`diagnose`: Python's ``ssl``, ALPN ``h2``, the same CA, certificate, key and
server name) and reads the first record: a daemon that refuses the certificate sends
its alert there (``SSLV3_ALERT_CERTIFICATE_EXPIRED``, ``TLSV1_ALERT_UNKNOWN_CA``, …); one
that accepts it sends its HTTP/2 SETTINGS, and then there is nothing to explain. A
daemon certificate this client refuses is in grpc's details already
(``CERTIFICATE_VERIFY_FAILED: …``, ``Hostname Verification Check failed``), and is
explained from them without a handshake.

The diagnosis never changes an answer: the call is a deny (a transport failure, retried
and counted as before) whether or not it is explained. It is bounded: at most one per
endpoint at a time and one per :data:`INTERVAL` seconds (the last reason is kept and
given to the failures in between), each within ``connect_timeout``; a call waits for it
at most ``connect_timeout`` and never past its own deadline, and a diagnosis that ends
later is attached to later answers and logged. The explanation holds the alert's name
and OpenSSL's description of the failure, never a key, a token or a file's contents.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import re
import socket
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from ._answer import Failed, Failure
from ._config import TlsConfig
from ._process import Lock

log = logging.getLogger("portcullis_client")

#: At most one diagnostic handshake per endpoint this often (seconds).
INTERVAL = 5.0
#: The same explanation of an endpoint is logged again after this long (seconds).
LOG_AGAIN = 60.0

PREFIX = "TLS handshake refused: "

#: What the daemon's alert says about this client's certificate (rustls's mapping of its
#: verifier's errors).
_REFUSED_CERTIFICATE = {
    "certificate_expired": "it has expired or is not yet valid",
    "unknown_ca": "it is not signed by a CA the daemon trusts",
    "unsupported_certificate": "its extended key usage does not allow client authentication",
    "bad_certificate": "it could not be decoded",
    "certificate_unknown": "the daemon cannot use it (an X.509 v1 certificate, or another defect)",
    "certificate_revoked": "it has been revoked",
    "decrypt_error": "its signature, or the handshake's, does not verify",
}

#: The other alerts a daemon (or a TLS proxy in front of it) ends a handshake with.
_OTHER_ALERTS = {
    "access_denied": "the daemon refused this client (access_denied)",
    "handshake_failure": (
        "the daemon and this client share no TLS version, cipher suite or key exchange (handshake_failure)"
    ),
    "protocol_version": "the daemon and this client share no TLS version (protocol_version)",
    "insufficient_security": "the daemon wants stronger ciphers than this client offered (insufficient_security)",
    "no_application_protocol": "the daemon does not speak HTTP/2 on this port (no_application_protocol)",
    "unrecognized_name": "the daemon has no certificate for the name this client asked for (unrecognized_name)",
}

_ALERT = re.compile(r"\b(?:SSLV3|TLSV1|TLSV13)_ALERT_([A-Z_]+)", re.IGNORECASE)
_VERIFY_FAILED = re.compile(r"CERTIFICATE_VERIFY_FAILED: ([^:;]+)", re.IGNORECASE)
_UNTRUSTED_ISSUER = re.compile(
    r"unable to verify the first certificate|unable to get local issuer certificate"
    r"|unable to get issuer certificate|self[- ]signed certificate",
    re.IGNORECASE,
)
_NOT_TLS = re.compile(r"WRONG_VERSION_NUMBER|PACKET_LENGTH_TOO_LONG|RECORD_LAYER_FAILURE|HTTP_REQUEST", re.IGNORECASE)

#: grpc's words for a connection that ended during or right after the handshake: what a
#: TLS alert the daemon sent arrives as. Only these are diagnosed (not a refused
#: connection, a DNS failure, a timeout).
_DIAGNOSED_WORDING = (
    "tsi_",
    "unwrap failed",
    "handshake",
    "ssl",
    "socket closed",
    "connection closed",
    "connection reset",
    "end of file",
)


def alert_message(alert: str, identity: bool) -> str:
    """What the daemon's TLS alert ``alert`` (``certificate_expired``) means for this
    client, which has a client certificate configured when ``identity``."""
    if alert == "certificate_required":
        if identity:
            return "the daemon requires a client certificate and got none it could use (certificate_required)"
        return "the daemon requires a client certificate (certificate_required): set tls cert_file and key_file"
    refused = _REFUSED_CERTIFICATE.get(alert)
    if refused is not None:
        if identity:
            return f"the daemon refused this client certificate: {refused} ({alert})"
        return f"the daemon refused the handshake ({alert}); no client certificate is configured (tls cert_file)"
    return _OTHER_ALERTS.get(alert, f"the daemon ended the handshake with the TLS alert {alert}")


def daemon_certificate_message(text: str, server_name: str) -> str | None:
    """Why this client refused the daemon's certificate, from OpenSSL's or BoringSSL's
    verification error ``text``; ``None`` when ``text`` is no such error."""
    lowered = text.lower()
    if "hostname" in lowered or "ip address mismatch" in lowered:
        return (
            f"the daemon's certificate does not carry the name {server_name}: "
            "connect by a name it carries, or set tls domain_name to one"
        )
    found = _UNTRUSTED_ISSUER.search(text)
    if found is not None:
        return f"the daemon's certificate is not signed by a CA in tls ca_file ({found.group(0)})"
    if "certificate has expired" in lowered:
        return "the daemon's certificate has expired (certificate has expired)"
    if "certificate is not yet valid" in lowered:
        return "the daemon's certificate is not yet valid (certificate is not yet valid)"
    if "unsupported certificate purpose" in lowered:
        return (
            "the daemon's certificate is not for server authentication: "
            "its extended key usage lacks serverAuth (unsupported certificate purpose)"
        )
    return None


def from_details(details: str, identity: bool, server_name: str) -> str | None:
    """The explanation grpc's status ``details`` give by themselves (a daemon
    certificate this client refused, an endpoint that does not speak TLS, an alert when
    grpc names it), with :data:`PREFIX`; ``None`` when they give none."""
    alert = _ALERT.search(details)
    if alert is not None:
        return PREFIX + alert_message(alert.group(1).lower(), identity)
    verify = _VERIFY_FAILED.search(details)
    if verify is not None:
        message = daemon_certificate_message(verify.group(1), server_name)
        if message is None:
            message = f"the daemon's certificate is not trusted ({verify.group(1).strip()})"
        return PREFIX + message
    if "hostname verification check failed" in details.lower():
        return PREFIX + (daemon_certificate_message("hostname", server_name) or "")
    if _NOT_TLS.search(details):
        return PREFIX + "the endpoint does not answer TLS: is it an http:// endpoint?"
    return None


def diagnose(host: str, port: int, server_name: str, tls: TlsConfig, timeout: float) -> str | None:
    """One handshake with ``tls``'s files to ``host:port`` and a read of the first
    record, all within ``timeout`` seconds: the explanation (with :data:`PREFIX`) of an
    alert the daemon sent or of a daemon certificate this client refuses; ``None`` when
    the daemon accepted the handshake, or nothing could be told (no connection, a
    timeout, a file that cannot be read)."""
    deadline = time.monotonic() + timeout
    identity = tls.cert_file is not None and tls.key_file is not None

    def left() -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        return remaining

    try:
        # Not ssl.create_default_context: its strict flags (Python 3.13) would refuse
        # certificates grpc accepts, and the diagnosis would blame the wrong side.
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_verify_locations(cafile=tls.ca_file)
        context.set_alpn_protocols(["h2"])
        if identity:
            context.load_cert_chain(tls.cert_file, tls.key_file)  # type: ignore[arg-type]
    except ssl.SSLError as e:
        if "KEY_VALUES_MISMATCH" in str(e.reason):
            return PREFIX + "tls key_file is not the key of tls cert_file"
        return None
    except (OSError, ValueError):
        return None
    try:
        with (
            socket.create_connection((host, port), timeout=left()) as raw,
            context.wrap_socket(raw, server_hostname=server_name, do_handshake_on_connect=False) as conn,
        ):
            conn.settimeout(left())
            conn.do_handshake()
            conn.settimeout(left())
            # The daemon's first record: its SETTINGS when it accepted this client, its
            # alert when it did not.
            conn.recv(1)
            return None
    except ssl.SSLCertVerificationError as e:
        text = str(e.verify_message or e.reason or "")
        message = daemon_certificate_message(text, server_name)
        return PREFIX + (message or f"the daemon's certificate is not trusted ({text})")
    except ssl.SSLError as e:
        reason = str(e.reason or "")
        alert = _ALERT.search(reason)
        if alert is not None:
            return PREFIX + alert_message(alert.group(1).lower(), identity)
        if _NOT_TLS.search(reason):
            return PREFIX + "the endpoint does not answer TLS: is it an http:// endpoint?"
        return None
    except (OSError, ValueError):  # refused, reset, timed out (TimeoutError is an OSError)
        return None


@dataclass
class _Endpoint:
    url: str
    host: str
    port: int
    server_name: str
    #: The last explanation, and the monotonic time its diagnosis started.
    reason: str | None = None
    diagnosed_at: float = -math.inf
    #: The process whose diagnosis is running (a forked child does not wait for the
    #: parent's thread, which it does not have).
    running_in: int | None = None
    logged: str | None = None
    logged_at: float = -math.inf


class TlsDiagnosis:
    """The explanations of one client's ``https://`` endpoints: at most one diagnosis
    per endpoint at a time and per :data:`INTERVAL`, the last reason kept."""

    def __init__(self, urls: Sequence[str], tls: TlsConfig | None, connect_timeout: float) -> None:
        self._tls = tls
        self._timeout = connect_timeout
        self._lock = Lock()
        self._endpoints: list[_Endpoint | None] = []
        for url in urls:
            parts = urlsplit(url)
            if parts.scheme != "https" or tls is None or parts.hostname is None:
                self._endpoints.append(None)
                continue
            name = tls.domain_name or parts.hostname
            self._endpoints.append(_Endpoint(url, parts.hostname, parts.port or 443, name))

    def wait(self, time_left: float) -> float:
        """How long a call with ``time_left`` seconds may wait for a diagnosis."""
        return max(0.0, min(self._timeout, time_left))

    def diagnosis_for(self, index: int, failed: Failed) -> Callable[[], None] | None:
        """The diagnostic handshake to run for ``failed`` on endpoint ``index`` (in a
        thread of its own; it records its result), or ``None``: not a TLS-looking
        failure of an ``https://`` endpoint, explained by grpc's details already, one
        running, or one made less than :data:`INTERVAL` ago."""
        endpoint = self._endpoints[index]
        tls = self._tls
        if endpoint is None or tls is None or not self._diagnosable(endpoint, failed):
            return None
        now = time.monotonic()
        with self._lock:
            if endpoint.running_in == os.getpid() or now - endpoint.diagnosed_at < INTERVAL:
                return None
            endpoint.running_in = os.getpid()
            endpoint.diagnosed_at = now

        def run() -> None:
            reason = None
            try:
                reason = diagnose(endpoint.host, endpoint.port, endpoint.server_name, tls, self._timeout)
            except Exception:  # noqa: BLE001 - a diagnosis never fails a call
                reason = None
            finally:
                with self._lock:
                    endpoint.running_in = None
                    endpoint.reason = reason
                self._note(endpoint, reason)

        return run

    def explained(self, index: int, failed: Failed) -> Failed:
        """``failed`` with ``reason`` set when it is a transport failure of an
        ``https://`` endpoint whose TLS failure the client can tell (from grpc's details,
        or the endpoint's last diagnosis); logged at warning when new."""
        endpoint = self._endpoints[index]
        if endpoint is None or failed.kind is not Failure.TRANSPORT:
            return failed
        reason = self._from_details(endpoint, failed)
        if reason is None and self._diagnosable(endpoint, failed):
            with self._lock:
                reason = endpoint.reason
        if reason is None:
            return failed
        self._note(endpoint, reason)
        return dataclasses.replace(failed, reason=reason)

    def answered(self, index: int) -> None:
        """Endpoint ``index`` answered: its last explanation no longer holds."""
        endpoint = self._endpoints[index]
        if endpoint is not None:
            with self._lock:
                endpoint.reason = None
                endpoint.logged = None

    def _from_details(self, endpoint: _Endpoint, failed: Failed) -> str | None:
        identity = self._tls is not None and self._tls.cert_file is not None
        return from_details(failed.details or "", identity, endpoint.server_name)

    def _diagnosable(self, endpoint: _Endpoint, failed: Failed) -> bool:
        if failed.kind is not Failure.TRANSPORT or self._from_details(endpoint, failed) is not None:
            return False
        details = (failed.details or "").lower()
        return any(w in details for w in _DIAGNOSED_WORDING)

    def _note(self, endpoint: _Endpoint, reason: str | None) -> None:
        """Logs ``reason`` at warning, unless it was logged for this endpoint less than
        :data:`LOG_AGAIN` ago."""
        if reason is None:
            return
        now = time.monotonic()
        with self._lock:
            if endpoint.logged == reason and now - endpoint.logged_at < LOG_AGAIN:
                return
            endpoint.logged = reason
            endpoint.logged_at = now
        log.warning("portcullis: %s: %s (calls to it are denied)", endpoint.url, reason)
