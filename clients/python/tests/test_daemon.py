"""Against the real daemon binary (PORTCULLIS_BINARY, or the repository's
target/debug/portcullis, built with `cargo build` when missing), on the embedded store
in a tmp dir."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import subprocess
import sys
import threading
import time

import pytest

from calls import ARGON2, PASSWORD
from daemon import Daemon
from proxy import CuttingProxy
from portcullis_client import AsyncClient, Client, ClientConfig, Decision

TESTS = pathlib.Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("store") / "data")
    yield d
    d.stop()


@pytest.fixture
def own_daemon(tmp_path):
    d = Daemon(tmp_path / "data")
    yield d
    d.stop()


def gateway(kind: str, url: str, identifier: str, client_key: str, *passwords: str) -> list[dict]:
    """One gateway process (tests/gateway_proc.py) making Verify calls in order."""
    out = subprocess.run(
        [sys.executable, str(TESTS / "gateway_proc.py"), kind, url, identifier, ARGON2, client_key, *passwords],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(TESTS)),
    )
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def test_a_lockout_holds_across_two_gateway_processes(daemon: Daemon) -> None:
    who = "lockout@example.com"
    # Gateway process 1 (sync client): five wrong passwords, each a plain deny.
    first = gateway("sync", daemon.url, who, "198.51.100.1", *(f"guess-{i}" for i in range(5)))
    assert [a["decision"] for a in first] == ["deny"] * 5
    assert not any(a["retryable"] for a in first)
    assert daemon.inspect("default", who).failures == 5
    # Gateway process 2 (asyncio client), another client address: the right password is
    # refused, because the lockout is the daemon's and not the first gateway's.
    second = gateway("asyncio", daemon.url, who, "192.0.2.77", PASSWORD)
    assert second == [{"decision": "deny", "retryable": False, "step_up": True}]
    # The same second process logs in to an account that is not locked.
    control = gateway("asyncio", daemon.url, "open@example.com", "192.0.2.77", PASSWORD)
    assert [a["decision"] for a in control] == ["allow"]
    assert daemon.inspect("default", who).door == 2  # DOOR_STATE_CLOSED


@pytest.mark.parametrize("kind", ["sync", "asyncio"])
def test_a_retried_attempt_is_counted_once(daemon: Daemon, kind: str) -> None:
    who = f"retried-{kind}@example.com"
    proxy = CuttingProxy(daemon.port)
    config = ClientConfig(endpoints=(proxy.url,), call_timeout=5.0)
    try:
        if kind == "sync":
            with Client(config) as client:
                answer = client.record_attempt("default", who, client_key="198.51.100.9")
                stats = client.stats()
        else:

            async def run():
                async with AsyncClient(config) as client:
                    return await client.record_attempt("default", who, client_key="198.51.100.9"), client.stats()

            answer, stats = asyncio.run(run())
    finally:
        proxy.close()
    # The first try reached the daemon and was counted; its answer was cut off. The
    # client retried with the same attempt_id on a new connection, and the daemon
    # answered the replay without counting it again.
    # (A retry may also fail on the dying connection before it reaches the proxy; the
    # next one then goes through.)
    assert proxy.cuts == 1 and proxy.connections >= 2
    assert 1 <= stats.retries <= 2
    assert answer.decision is Decision.ALLOW
    assert daemon.inspect("default", who).failures == 1


@pytest.mark.parametrize("kind", ["sync", "asyncio"])
def test_a_daemon_killed_mid_call_is_a_deny_within_the_deadline(own_daemon: Daemon, kind: str) -> None:
    call_timeout = 3.0
    config = ClientConfig(endpoints=(own_daemon.url,), call_timeout=call_timeout)
    login = dict(realm="default", identifier="killed@example.com", password=PASSWORD, stored_hash=ARGON2, client_key="203.0.113.50")
    result: dict = {}

    if kind == "sync":
        client = Client(config)
        assert client.verify(**login).decision is Decision.ALLOW  # connected and working

        def call() -> None:
            start = time.monotonic()
            result["answer"] = client.verify(**login)
            result["elapsed"] = time.monotonic() - start

        worker = threading.Thread(target=call)
    else:
        loop = asyncio.new_event_loop()
        client = AsyncClient(config)
        assert loop.run_until_complete(client.verify(**login)).decision is Decision.ALLOW

        async def acall() -> None:
            start = time.monotonic()
            result["answer"] = await client.verify(**login)
            result["elapsed"] = time.monotonic() - start

        worker = threading.Thread(target=lambda: loop.run_until_complete(acall()))

    # Frozen, the daemon receives the request but cannot answer it: the call is
    # certainly in flight when SIGKILL arrives.
    own_daemon.freeze()
    worker.start()
    time.sleep(0.5)
    assert worker.is_alive(), "the call ended before the daemon was killed"
    own_daemon.kill()
    killed_at = time.monotonic()
    worker.join(timeout=call_timeout + 2)
    assert not worker.is_alive()
    answer = result["answer"]
    assert answer.decision is Decision.DENY
    assert answer.retryable is True
    assert result["elapsed"] < call_timeout + 0.3
    # The reset was seen and the retries refused at once: no waiting out the deadline.
    assert time.monotonic() - killed_at < 1.0
    stats = client.stats()
    assert stats.retries >= 1
    if kind == "sync":
        client.close()
    else:
        loop.run_until_complete(client.close())
        loop.close()
