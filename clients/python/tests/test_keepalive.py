"""Keepalive against the real daemon: a connection that stays open while nothing answers
(the daemon stopped with SIGSTOP, behind a TCP proxy, as a NAT or load balancer that
dropped the flow without a word looks to the client) gives denies within the call
deadline, and the client leaves it for a new connection once its pings go unanswered."""

from __future__ import annotations

import signal
import time
import uuid

import pytest

from calls import ARGON2, PASSWORD
from daemon import Daemon
from proxy import CuttingProxy
from runner import Runner
from portcullis_client import ClientConfig, ConfigError, Decision

CALL_TIMEOUT = 1.0
# grpc's own deadline fires on time; this is scheduling slack on a loaded machine.
SLACK = 0.5
# Keepalive finds the dead connection within keepalive_time + keepalive_timeout (1 s
# here); the rest is the ejection's back-off and a loaded machine.
RECOVERY_BOUND = 15.0
# Daemons here are killed or stopped at once (no drain).
CONFIG = 'shutdown_delay = "0s"\n'


def login(identifier: str) -> dict:
    return dict(realm="default", identifier=identifier, password=PASSWORD, stored_hash=ARGON2, client_key="203.0.113.80")


def config(url: str, keepalive_time: float, keepalive_timeout: float) -> ClientConfig:
    return ClientConfig(
        endpoints=(url,),
        call_timeout=CALL_TIMEOUT,
        keepalive_time=keepalive_time,
        keepalive_timeout=keepalive_timeout,
        eject_for=0.2,
        eject_max=0.4,
    )


def stop_for_good(daemon: Daemon) -> None:
    """SIGCONT, then SIGKILL: a stopped daemon never outlives its test."""
    if daemon.proc.poll() is None:
        daemon.proc.send_signal(signal.SIGCONT)
        daemon.kill()
    daemon.stop()


def denied_while_frozen(runner: Runner, who: str) -> None:
    """Calls to the stopped daemon: each a retryable deny within the call deadline."""
    for _ in range(3):
        start = time.monotonic()
        answer = runner.call("verify", **login(who))
        elapsed = time.monotonic() - start
        assert (answer.decision, answer.retryable) == (Decision.DENY, True)
        assert elapsed < CALL_TIMEOUT + SLACK, f"answered after {elapsed:.2f} s"


def first_allow_within(runner: Runner, who: str, bound: float) -> float | None:
    """Seconds until a verify is allowed again, or ``None`` within ``bound``."""
    start = time.monotonic()
    while time.monotonic() - start < bound:
        if runner.call("verify", **login(who)).allowed:
            return time.monotonic() - start
        time.sleep(0.1)
    return None


@pytest.mark.parametrize("kind", ["sync", "asyncio"])
def test_keepalive_leaves_a_dead_connection_for_a_daemon_that_answers(tmp_path, kind: str) -> None:
    first = Daemon(tmp_path / "first", CONFIG)
    second: Daemon | None = None
    proxy = CuttingProxy(first.port, cut_connections=0)  # forwards every connection
    runner = Runner(kind, config(proxy.url, keepalive_time=0.5, keepalive_timeout=0.5))
    who = f"keepalive-{uuid.uuid4().hex[:8]}@example.com"
    try:
        assert runner.call("verify", **login(who)).allowed
        assert proxy.connections == 1
        # The daemon stops: its socket stays open and nothing answers.
        first.freeze()
        denied_while_frozen(runner, who)
        # A second daemon takes the proxy's new connections; the old one still leads to
        # the stopped daemon, so only a new connection can be allowed.
        second = Daemon(tmp_path / "second", CONFIG)
        proxy.upstream_port = second.port
        took = first_allow_within(runner, who, RECOVERY_BOUND)
        assert took is not None, f"no allow within {RECOVERY_BOUND} s: the dead connection was kept"
        assert proxy.connections >= 2
    finally:
        runner.close()
        proxy.close()
        stop_for_good(first)
        if second is not None:
            second.stop()


def test_without_keepalive_the_client_stays_on_the_dead_connection(tmp_path) -> None:
    """The test above with keepalive out of the way (pings a day apart, a day to answer
    one): no allow in a bound several times what keepalive needs there, so the recovery
    above is keepalive's doing."""
    first = Daemon(tmp_path / "first", CONFIG)
    second: Daemon | None = None
    proxy = CuttingProxy(first.port, cut_connections=0)
    runner = Runner("sync", config(proxy.url, keepalive_time=86400, keepalive_timeout=86400))
    who = f"no-keepalive-{uuid.uuid4().hex[:8]}@example.com"
    try:
        assert runner.call("verify", **login(who)).allowed
        first.freeze()
        denied_while_frozen(runner, who)
        second = Daemon(tmp_path / "second", CONFIG)
        proxy.upstream_port = second.port
        assert first_allow_within(runner, who, 4.0) is None
        assert proxy.connections == 1
    finally:
        runner.close()
        proxy.close()
        stop_for_good(first)
        if second is not None:
            second.stop()


def test_the_keepalive_settings_become_channel_options_and_are_checked() -> None:
    from portcullis_client._config import channel_options

    options = dict(channel_options(ClientConfig()))
    assert options["grpc.keepalive_time_ms"] == 30_000
    assert options["grpc.keepalive_timeout_ms"] == options["grpc.http2.ping_timeout_ms"] == 10_000
    assert options["grpc.keepalive_permit_without_calls"] == 1
    assert options["grpc.http2.max_pings_without_data"] == 0
    custom = dict(channel_options(ClientConfig(keepalive_time=5, keepalive_timeout=2.5, keepalive_permit_without_calls=False)))
    assert (custom["grpc.keepalive_time_ms"], custom["grpc.keepalive_timeout_ms"]) == (5000, 2500)
    assert custom["grpc.keepalive_permit_without_calls"] == 0
    for bad, setting in [
        (dict(keepalive_time=0), "keepalive_time"),
        (dict(keepalive_time="30"), "keepalive_time"),
        (dict(keepalive_timeout=-1.0), "keepalive_timeout"),
        (dict(keepalive_permit_without_calls=1), "keepalive_permit_without_calls"),
    ]:
        with pytest.raises(ConfigError, match=setting):
            ClientConfig(**bad)
