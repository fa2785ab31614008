"""Fork safety against the real daemon: a client that made a call in the parent is used
in a child made with os.fork() (as gunicorn --preload makes its workers); the child
builds its own connection and gets its own answer, and the parent keeps its connection
and keeps working. The connections are counted by a TCP proxy in front of the daemon."""

from __future__ import annotations

import json
import os
import select
import signal
import time
import traceback
import uuid

import pytest

from calls import ARGON2, PASSWORD
from daemon import Daemon
from faults import AnswerEndpoint
from proxy import CuttingProxy
from runner import Runner
from portcullis_client import ClientConfig, _process

CHILD_BOUND = 30.0


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("fork") / "data", 'shutdown_delay = "0s"\n')
    yield d
    d.stop()


def login(who: str) -> dict:
    return dict(realm="default", identifier=who, password=PASSWORD, stored_hash=ARGON2, client_key="203.0.113.90")


def in_child(runner: Runner, who: str) -> dict:
    """Forks; the child makes one verify with ``runner``'s client, reports the answer
    and which stub it used through a pipe, and leaves with os._exit. The parent reads
    the report (bounded)."""
    parents_stub = runner.client._channels._stubs[0]
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.close(read_end)
            if runner.kind == "asyncio":
                import asyncio

                answer = asyncio.run(runner.client.verify(**login(who)))
            else:
                answer = runner.client.verify(**login(who))
            used = runner.client._channels._stubs[0]
            report = {
                "decision": answer.decision.value,
                "pid": os.getpid(),
                # Not the parent's stub (nor its channel), which is kept, unused.
                "own_stub": used is not None and used is not parents_stub,
                "parents_kept": parents_stub is None or any(parents_stub in stubs for _, stubs in _process._INHERITED),
            }
            os.write(write_end, json.dumps(report).encode())
            code = 0
        except BaseException:  # noqa: BLE001 - reported to the parent, never raised here
            os.write(write_end, json.dumps({"error": traceback.format_exc()[-2000:]}).encode())
        finally:
            os._exit(code)
    os.close(write_end)
    try:
        ready, _, _ = select.select([read_end], [], [], CHILD_BOUND)
        data = os.read(read_end, 65536) if ready else b""
    finally:
        os.close(read_end)
    deadline = time.monotonic() + 10
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            break
        time.sleep(0.05)
    assert data, f"the child reported nothing within {CHILD_BOUND} s"
    report = json.loads(data)
    assert "error" not in report, report.get("error")
    assert report["pid"] != os.getpid()
    return report


@pytest.fixture
def grpc_busy_at_fork():
    """A grpcio server in this process: its threads wait inside grpc when the test forks,
    so grpc's own fork handlers stand aside ("Other threads are currently calling into
    gRPC, skipping fork() handlers"), as in a gateway that serves or calls grpc in other
    threads when it forks."""
    endpoint = AnswerEndpoint(answer={"decision": 1})
    yield endpoint
    endpoint.close()


@pytest.mark.parametrize("kind", ["sync", "asyncio"])
def test_a_client_used_before_fork_builds_its_own_connection_in_the_child(daemon: Daemon, kind: str, grpc_busy_at_fork) -> None:
    proxy = CuttingProxy(daemon.port, cut_connections=0)  # forwards and counts connections
    runner = Runner(kind, ClientConfig(endpoints=(proxy.url,), call_timeout=5.0))
    who = f"fork-{kind}-{uuid.uuid4().hex[:8]}@example.com"
    try:
        assert runner.call("verify", **login(who)).allowed
        assert proxy.connections == 1
        report = in_child(runner, who)
        # The child's own answer, on a channel and a connection of its own.
        assert report["decision"] == "allow"
        assert report["own_stub"] and report["parents_kept"]
        assert proxy.connections == 2
        # The parent keeps working on the connection it had: no third connection.
        for _ in range(3):
            assert runner.call("verify", **login(who)).allowed
        assert proxy.connections == 2
        assert runner.client.stats().transport_failures == 0
    finally:
        runner.close()
        proxy.close()


@pytest.mark.parametrize("kind", ["sync", "asyncio"])
def test_a_client_made_before_fork_and_first_used_in_the_child_works_in_both(daemon: Daemon, kind: str) -> None:
    """gunicorn --preload: the master builds the client and never calls; each worker's
    first call builds that worker's channel."""
    proxy = CuttingProxy(daemon.port, cut_connections=0)
    runner = Runner(kind, ClientConfig(endpoints=(proxy.url,), call_timeout=5.0))
    who = f"preload-{kind}-{uuid.uuid4().hex[:8]}@example.com"
    try:
        assert proxy.connections == 0
        report = in_child(runner, who)
        assert (report["decision"], report["own_stub"], report["parents_kept"]) == ("allow", True, True)
        assert proxy.connections == 1
        assert runner.call("verify", **login(who)).allowed
        assert proxy.connections == 2
    finally:
        runner.close()
        proxy.close()


def test_a_lock_held_by_another_thread_at_the_fork_is_free_in_the_child() -> None:
    """A thread of the parent holds the client's counter lock when the parent forks; the
    child (which has no such thread) still counts its calls instead of deadlocking."""
    import threading

    from portcullis_client import Client

    client = Client(ClientConfig(endpoints=("http://127.0.0.1:9",)))
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with client._core._lock:
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(10)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.write(write_end, str(client.stats().calls).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        ready, _, _ = select.select([read_end], [], [], 10)
        data = os.read(read_end, 100) if ready else b""
    finally:
        os.close(read_end)
        release.set()
        holder.join(10)
        if not data:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        client.close()
    assert data == b"0", "the child deadlocked on a lock its parent's thread held"
