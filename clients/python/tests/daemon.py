"""The real daemon: found (or built) and started on the embedded store in a tmp dir."""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import socket
import subprocess
import time

import grpc

from portcullis_client._pb import admin_pb2, admin_pb2_grpc, governor_pb2

REPO = pathlib.Path(__file__).resolve().parents[3]
KEY_SECRET = "python-client-tests-key-secret-0123456789abcdef"  # 32+ bytes, as-is


def binary() -> pathlib.Path:
    """$PORTCULLIS_BINARY, else the repository's target/debug/portcullis, built with
    `cargo build` when missing."""
    env = os.environ.get("PORTCULLIS_BINARY")
    if env:
        path = pathlib.Path(env)
        if not path.is_file():
            raise FileNotFoundError(f"PORTCULLIS_BINARY={env} is not a file")
        return path
    path = REPO / "target" / "debug" / "portcullis"
    if not path.is_file():
        if shutil.which("cargo") is None:
            raise FileNotFoundError(f"{path} is missing and cargo is not on the PATH")
        subprocess.run(["cargo", "build", "--bin", "portcullis"], cwd=REPO, check=True)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """``portcullis serve`` on the embedded store in ``data_dir``. ``config_toml``
    (optional) is written next to it and passed as ``--config`` (realms and their
    settings; the store, listen address and admin listener stay the command line's). A
    daemon whose configuration has ``[tls]`` is waited for over TLS with
    ``ready_credentials`` (a client certificate it accepts, for mutual TLS); its
    ``https_url`` is ``https://localhost:PORT``."""

    def __init__(
        self,
        data_dir: pathlib.Path,
        config_toml: str | None = None,
        ready_credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.addr = f"127.0.0.1:{self.port}"
        self.https_url = f"https://localhost:{self.port}"
        self._ready_credentials = ready_credentials
        self.log_path = data_dir.parent / f"portcullis-{self.port}.log"
        env = dict(os.environ, PORTCULLIS_KEY_SECRET=KEY_SECRET)
        for name in ("PORTCULLIS_CONFIG", "PORTCULLIS_REDIS_URL", "PORTCULLIS_REDIS_CLUSTER_NODES"):
            env.pop(name, None)
        config_args: list[str] = []
        if config_toml is not None:
            config_path = data_dir.parent / f"portcullis-{self.port}.toml"
            config_path.write_text(config_toml, encoding="utf-8")
            config_args = ["--config", str(config_path)]
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [str(binary()), "serve", *config_args, "--listen", self.addr, "--admin-listen", "", "--data-dir", str(data_dir)],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self._wait_ready()

    def _wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        if self._ready_credentials is None:
            channel = grpc.insecure_channel(self.addr)
        else:
            channel = grpc.secure_channel(f"localhost:{self.port}", self._ready_credentials)
        with channel:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the daemon exited ({self.proc.returncode}): {self.log()}")
                try:
                    grpc.channel_ready_future(channel).result(timeout=0.2)
                    return
                except grpc.FutureTimeoutError:
                    continue
        # Not left running (holding its port and data directory) when the test fails.
        self.proc.kill()
        self.proc.wait()
        raise RuntimeError(f"the daemon did not listen within {timeout} s: {self.log()}")

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-4000:]

    def inspect(self, realm: str, identifier: str, flow: int = 0) -> admin_pb2.InspectResponse:
        """portcullis.v1.Admin/Inspect: the account's lockout state (or a flow's record,
        by its wire number), read only."""
        with grpc.insecure_channel(self.addr) as channel:
            stub = admin_pb2_grpc.AdminStub(channel)
            account = governor_pb2.Account(realm=realm, identifier=identifier)
            return stub.Inspect(admin_pb2.InspectRequest(account=account, flow=flow), timeout=5)

    def freeze(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def kill(self) -> None:
        self.proc.kill()  # SIGKILL
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()
