"""Against the real daemon over mutual TLS (certificates made with openssl, tests/pki.py):
every client certificate the daemon refuses, and every daemon certificate this client
refuses, is a deny whose ``failure_reason`` says "TLS handshake refused:" and why, for
the blocking and the asyncio client; the configured caller's certificate is served.
grpc reports the daemon's alert only as ``TSI_DATA_CORRUPTED``, so these also check the
diagnostic handshake: made once per endpoint per interval, never past the deadline."""

from __future__ import annotations

import logging
import pathlib
import re
import threading
import time

import grpc
import pytest
from daemon import Daemon
from pki import Leaf, Pki, make_pki

from portcullis_client import (
    AsyncClient,
    Client,
    ClientConfig,
    Decision,
    PasswordCheck,
    PasswordCheckResult,
    TlsConfig,
    _tls,
)
from portcullis_client._answer import Failed, Failure


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def read(path: str) -> bytes:
    return pathlib.Path(path).read_bytes()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory, pki: Pki):
    good = grpc.ssl_channel_credentials(read(pki.ca_file), read(pki.good.key_file), read(pki.good.cert_file))
    d = Daemon(tmp_path_factory.mktemp("tls-store") / "data", pki.daemon_toml(), ready_credentials=good)
    yield d
    d.stop()


def tls(pki: Pki, leaf: Leaf | None, ca_file: str | None = None, domain_name: str | None = None) -> TlsConfig:
    return TlsConfig(
        ca_file=ca_file or pki.ca_file,
        cert_file=None if leaf is None else leaf.cert_file,
        key_file=None if leaf is None else leaf.key_file,
        domain_name=domain_name,
    )


def config(url: str, tls_config: TlsConfig) -> ClientConfig:
    return ClientConfig(endpoints=(url,), tls=tls_config, eject_after=100)


async def attempt(kind: str, url: str, tls_config: TlsConfig) -> tuple[object, PasswordCheck]:
    """One record_attempt and one check_password with a fresh client of ``kind``."""
    if kind == "sync":
        with Client(config(url, tls_config)) as c:
            return c.record_attempt("default", "tls@example.com"), c.check_password("default", "tls@example.com", "pw")
    async with AsyncClient(config(url, tls_config)) as a:
        return await a.record_attempt("default", "tls@example.com"), await a.check_password(
            "default", "tls@example.com", "pw"
        )


def assert_refused(answer, check: PasswordCheck, expected: str, tls_config: TlsConfig, caplog) -> None:
    assert answer.decision is Decision.DENY
    assert answer.retryable is True
    assert answer.status_code is None
    reason = answer.failure_reason
    assert reason is not None, repr(answer)
    assert reason.startswith("TLS handshake refused: "), reason
    assert re.search(expected, reason), reason
    assert reason in repr(answer)
    # A check that could not be made is refused, with the same explanation.
    assert check.result is PasswordCheckResult.UNCHECKED and check.retryable
    assert check.failure_reason == reason
    # Logged once per client at warning, with the endpoint.
    logged = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and reason in r.getMessage()]
    assert len(logged) == 1, caplog.text
    # Nothing secret: no key, no file's contents, no path.
    for path in (tls_config.key_file, tls_config.cert_file):
        if path is not None:
            assert path not in reason and path not in caplog.text
            assert read(path).decode().splitlines()[1] not in caplog.text
    assert "PRIVATE KEY" not in caplog.text and "BEGIN" not in reason


CLIENT_CERTIFICATES = [
    (
        "expired",
        r"^TLS handshake refused: the daemon refused this client certificate: "
        r"it has expired or is not yet valid \(certificate_expired\)$",
    ),
    ("not_yet_valid", r"it has expired or is not yet valid \(certificate_expired\)$"),
    (
        "other_ca_leaf",
        r"^TLS handshake refused: the daemon refused this client certificate: "
        r"it is not signed by a CA the daemon trusts \(unknown_ca\)$",
    ),
    (
        "server_auth_only",
        r"^TLS handshake refused: the daemon refused this client certificate: "
        r"its extended key usage does not allow client authentication \(unsupported_certificate\)$",
    ),
    (
        "v1",
        r"^TLS handshake refused: the daemon refused this client certificate: .*X\.509 v1 certificate.*"
        r" \(certificate_unknown\)$",
    ),
]


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_the_configured_caller_is_served_over_mutual_tls(kind, pki, daemon, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="portcullis_client")
    answer, _check = await attempt(kind, daemon.https_url, tls(pki, pki.good))
    assert answer.decision is Decision.ALLOW, repr(answer)
    assert answer.failure_reason is None
    assert "TLS handshake refused" not in caplog.text


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize(("leaf", "expected"), CLIENT_CERTIFICATES, ids=[c[0] for c in CLIENT_CERTIFICATES])
async def test_a_client_certificate_the_daemon_refuses_is_explained(kind, leaf, expected, pki, daemon, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="portcullis_client")
    chosen = getattr(pki, leaf)
    if chosen is None:
        pytest.skip("this openssl makes no X.509 v1 certificate")
    tls_config = tls(pki, chosen)
    answer, check = await attempt(kind, daemon.https_url, tls_config)
    assert_refused(answer, check, expected, tls_config, caplog)


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_no_client_certificate_says_what_to_set(kind, pki, daemon, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="portcullis_client")
    tls_config = tls(pki, None)
    answer, check = await attempt(kind, daemon.https_url, tls_config)
    expected = (
        r"^TLS handshake refused: the daemon requires a client certificate \(certificate_required\): "
        r"set tls cert_file and key_file$"
    )
    assert_refused(answer, check, expected, tls_config, caplog)


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_daemon_certificate_of_another_ca_is_explained(kind, pki, daemon, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="portcullis_client")
    tls_config = tls(pki, pki.good, ca_file=pki.other_ca_file)
    answer, check = await attempt(kind, daemon.https_url, tls_config)
    expected = r"^TLS handshake refused: the daemon's certificate is not signed by a CA in tls ca_file \(.+\)$"
    assert_refused(answer, check, expected, tls_config, caplog)


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_daemon_certificate_without_the_name_checked_is_explained(kind, pki, daemon, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="portcullis_client")
    tls_config = tls(pki, pki.good, domain_name="wrong.test")
    answer, check = await attempt(kind, daemon.https_url, tls_config)
    expected = r"^TLS handshake refused: the daemon's certificate does not carry the name wrong\.test: .*domain_name"
    assert_refused(answer, check, expected, tls_config, caplog)


async def test_an_https_endpoint_that_is_plain_http2_is_explained(pki, tmp_path, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="portcullis_client")
    plain = Daemon(tmp_path / "data")
    try:
        tls_config = tls(pki, pki.good)
        answer, check = await attempt("sync", f"https://localhost:{plain.port}", tls_config)
        assert_refused(answer, check, r"^TLS handshake refused: the endpoint does not answer TLS", tls_config, caplog)
    finally:
        plain.kill()
        plain.stop()


def test_one_diagnosis_per_endpoint_per_interval(pki, daemon, monkeypatch) -> None:
    made: list[float] = []
    real = _tls.diagnose

    def counted(*args, **kwargs):
        made.append(time.monotonic())
        return real(*args, **kwargs)

    monkeypatch.setattr(_tls, "diagnose", counted)
    with Client(config(daemon.https_url, tls(pki, pki.expired))) as c:
        answers = [c.record_attempt("default", "tls@example.com") for _ in range(5)]
    assert len(made) == 1, made
    assert all(a.decision is Decision.DENY for a in answers)
    # The later failures get the last reason without a handshake of their own.
    assert {a.failure_reason for a in answers} == {
        "TLS handshake refused: the daemon refused this client certificate: "
        "it has expired or is not yet valid (certificate_expired)"
    }


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_diagnosis_never_holds_the_answer_past_the_deadline(kind, pki, daemon, monkeypatch) -> None:
    """With no time left to wait, the deny comes at once without a reason; the diagnosis
    ends in the background and explains the next failure."""
    monkeypatch.setattr(_tls.TlsDiagnosis, "wait", lambda self, time_left: 0.0)
    finished = threading.Event()
    real = _tls.diagnose

    def slow(*args, **kwargs):
        time.sleep(0.3)
        try:
            return real(*args, **kwargs)
        finally:
            finished.set()

    monkeypatch.setattr(_tls, "diagnose", slow)
    started = time.monotonic()
    first, second = await two_attempts(kind, daemon.https_url, tls(pki, pki.expired), finished)
    assert first[1] < 0.25, f"the first deny waited {first[1]:.3f} s for the diagnosis"
    assert first[0].decision is Decision.DENY and first[0].failure_reason is None
    assert second.decision is Decision.DENY
    assert second.failure_reason is not None and "(certificate_expired)" in second.failure_reason
    assert time.monotonic() - started < 5


async def two_attempts(kind: str, url: str, tls_config: TlsConfig, finished: threading.Event):
    """A first attempt (its answer and how long it took), then, once the diagnosis
    finished, a second one."""
    if kind == "sync":
        with Client(config(url, tls_config)) as c:
            t = time.monotonic()
            first = c.record_attempt("default", "tls@example.com")
            took = time.monotonic() - t
            assert finished.wait(5)
            return (first, took), c.record_attempt("default", "tls@example.com")
    async with AsyncClient(config(url, tls_config)) as a:
        t = time.monotonic()
        first = await a.record_attempt("default", "tls@example.com")
        took = time.monotonic() - t
        assert finished.wait(5)
        return (first, took), await a.record_attempt("default", "tls@example.com")


def test_http_endpoints_and_other_failures_are_not_diagnosed(monkeypatch) -> None:
    monkeypatch.setattr(_tls, "diagnose", lambda *a, **k: pytest.fail("no diagnosis expected"))
    with Client(ClientConfig(endpoints=("http://127.0.0.1:1",), call_timeout=1.0)) as c:
        answer = c.record_attempt("default", "x@example.com")
    assert answer.decision is Decision.DENY and answer.failure_reason is None
    diagnosis = _tls.TlsDiagnosis(["https://localhost:1"], TlsConfig(ca_file="/nonexistent"), 0.5)
    refused = Failed(Failure.TRANSPORT, details="failed to connect to all addresses; last error: Connection refused")
    assert diagnosis.diagnosis_for(0, refused) is None
    assert diagnosis.explained(0, refused) == refused
    assert diagnosis.diagnosis_for(0, Failed(Failure.TIMEOUT)) is None
    answered = Failed(Failure.ANSWERED, grpc.StatusCode.UNAVAILABLE, "ssl handshake failed")
    assert diagnosis.diagnosis_for(0, answered) is None


def test_grpc_details_and_alert_names_are_read() -> None:
    verify = (
        "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Tls handshake failed "
        "(TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: error:1000007d:SSL routines:OPENSSL_internal:"
        "CERTIFICATE_VERIFY_FAILED: certificate has expired: OK"
    )
    assert _tls.from_details(verify, True, "localhost") == (
        "TLS handshake refused: the daemon's certificate has expired (certificate has expired)"
    )
    alert = "…: error:10000418:SSL routines:OPENSSL_internal:TLSV1_ALERT_UNKNOWN_CA"
    assert _tls.from_details(alert, True, "x") == (
        "TLS handshake refused: the daemon refused this client certificate: "
        "it is not signed by a CA the daemon trusts (unknown_ca)"
    )
    assert _tls.from_details("ipv4:127.0.0.1:1: Unwrap failed (TSI_DATA_CORRUPTED)", True, "x") is None
    assert _tls.alert_message("decrypt_error", True) == (
        "the daemon refused this client certificate: its signature, or the handshake's, does not verify (decrypt_error)"
    )
    assert _tls.alert_message("access_denied", True) == "the daemon refused this client (access_denied)"
    assert _tls.alert_message("bad_certificate", True).endswith("it could not be decoded (bad_certificate)")
    assert _tls.alert_message("made_up", True) == "the daemon ended the handshake with the TLS alert made_up"


def test_only_a_plain_deny_carries_a_failure_reason() -> None:
    from portcullis_client import Answer, AnswerKind

    reason = "TLS handshake refused: the daemon refused this client (access_denied)"
    deny = Answer(Decision.DENY, retryable=True, failure_reason=reason)
    assert deny == Answer.deny(True), "not compared by =="
    assert f"failure_reason={reason!r}" in repr(deny)
    with pytest.raises(ValueError):
        Answer(Decision.ALLOW, failure_reason=reason)
    with pytest.raises(ValueError):
        Answer(Decision.DENY, kind=AnswerKind.CHANGE_REQUIRED, failure_reason=reason)
