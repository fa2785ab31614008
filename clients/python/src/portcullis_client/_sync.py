"""The blocking client, for threaded gateways (WSGI, Django, Flask)."""

from __future__ import annotations

import threading
import time
from typing import Any

import grpc

from . import _core
from ._answer import Answer, ClearReason, Failed, Failure, Flow, PasswordCheck
from ._classify import classify
from ._config import ClientConfig
from ._core import BadInput, Call, ClientStats, Core
from ._pb import governor_pb2_grpc as pbg
from ._trace import call_span


class Client:
    """The gateway's handle to the daemon fleet; safe to share between threads.

    Every method answers; none raises for anything that happens between gateway and
    daemon (docs/client.md, "Every outcome"): a refused or reset connection, a timeout,
    an open breaker, an error status, an unknown enum value all arrive as a deny.
    Channels connect lazily, on the first call to each endpoint.
    """

    def __init__(self, config: ClientConfig | None = None) -> None:
        self._core = Core(config)
        self._lock = threading.Lock()
        self._channels: list[grpc.Channel | None] = [None] * len(self._core.targets)
        self._stubs: list[pbg.GovernorStub | None] = [None] * len(self._core.targets)
        self._closed = False

    def __repr__(self) -> str:
        return f"Client(endpoints={list(self._core.config.endpoints)!r})"

    # lifecycle --------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            self._closed = True
            channels, self._channels = self._channels, [None] * len(self._channels)
            self._stubs = [None] * len(self._stubs)
        for channel in channels:
            if channel is not None:
                channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _stub(self, index: int) -> pbg.GovernorStub:
        with self._lock:
            if self._closed:
                raise RuntimeError("client closed")
            stub = self._stubs[index]
            if stub is None:
                target, secure = self._core.targets[index]
                if secure:
                    channel = grpc.secure_channel(target, self._core.credentials, options=self._core.options)
                else:
                    channel = grpc.insecure_channel(target, options=self._core.options)
                self._channels[index] = channel
                stub = self._stubs[index] = pbg.GovernorStub(channel)
            return stub

    # the API ----------------------------------------------------------------
    def admit(self, realm: str, identifier: str, *, traceparent: str | None = None, tracestate: str | None = None) -> Answer:
        """``Admit``: is the account key's door open? Never counts."""
        return self._run("Admit", lambda: _core.admit_call(realm, identifier), traceparent, tracestate)

    def record_attempt(
        self,
        realm: str,
        identifier: str,
        *,
        client_key: str = "",
        attempt_id: str | None = None,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> Answer:
        """``RecordAttempt``: counts one attempt before the gateway compares the hash
        itself. ``attempt_id`` (generated when ``None``) makes retries idempotent;
        ``client_key`` (see :func:`client_key_from_forwarded`) also takes a token of the
        client network's bucket."""
        return self._run(
            "RecordAttempt",
            lambda: _core.record_attempt_call(realm, identifier, client_key, attempt_id),
            traceparent,
            tracestate,
        )

    def verify(
        self,
        *,
        realm: str,
        identifier: str,
        password: str | bytes,
        stored_hash: str,
        client_key: str,
        attempt_id: str | None = None,
        device_token: str | None = None,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> Answer:
        """``Verify``: the whole login check. ``stored_hash`` is ``""`` for an unknown or
        disabled account. Routed by ``client_key``."""
        return self._run(
            "Verify",
            lambda: _core.verify_call(realm, identifier, password, stored_hash, client_key, attempt_id, device_token),
            traceparent,
            tracestate,
        )

    def clear_attempts(
        self,
        realm: str,
        identifier: str,
        reason: ClearReason,
        *,
        client_key: str = "",
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> Answer:
        """``ClearAttempts``: allowed when the daemon cleared the record. With
        ``PASSWORD_VERIFIED``, ``client_key`` names the ``record_attempt`` whose password
        matched, whose network token is given back."""
        return self._run(
            "ClearAttempts",
            lambda: _core.clear_attempts_call(realm, identifier, reason, client_key),
            traceparent,
            tracestate,
        )

    def check_password(
        self, realm: str, identifier: str, password: str | bytes, *, traceparent: str | None = None, tracestate: str | None = None
    ) -> PasswordCheck:
        """``CheckPassword`` at set and change time: only ``ACCEPTABLE`` accepts."""
        return self._run(
            "CheckPassword", lambda: _core.check_password_call(realm, identifier, password), traceparent, tracestate
        )

    def confirm_device(
        self,
        *,
        realm: str,
        identifier: str,
        challenge_token: str,
        stored_hash: str,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> Answer:
        """``ConfirmDevice``, after a ``verify`` answered ``AnswerKind.CHALLENGE`` and the
        gateway's second factor passed: exchanges the challenge token for a device token.
        ``ALLOW`` carries ``device_token`` (set the device cookie, then start the
        session); every failure is a deny without one (``FAILED_PRECONDITION``: the token
        is not valid, another account's or credential's, or older than 15 minutes)."""
        return self._run(
            "ConfirmDevice",
            lambda: _core.confirm_device_call(realm, identifier, challenge_token, stored_hash),
            traceparent,
            tracestate,
        )

    def record_flow_attempt(
        self,
        realm: str,
        identifier: str,
        flow: Flow,
        *,
        client_key: str = "",
        attempt_id: str | None = None,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> Answer:
        """``RecordFlowAttempt``: counts one attempt at ``flow`` for the account *before*
        the gateway acts (checks the code, sends the mail); act only on ``ALLOW``. The
        outcomes of ``record_attempt``: only ``DECISION_ALLOW`` allows, transport
        failures are retried with the same ``attempt_id`` (generated when ``None``).
        ``client_key`` is required for the mail flows; the code flows ignore it."""
        return self._run(
            "RecordFlowAttempt",
            lambda: _core.record_flow_attempt_call(realm, identifier, flow, client_key, attempt_id),
            traceparent,
            tracestate,
        )

    def second_factor_attempt(
        self, realm: str, identifier: str, *, attempt_id: str | None = None, traceparent: str | None = None, tracestate: str | None = None
    ) -> Answer:
        """``record_flow_attempt(..., Flow.SECOND_FACTOR)``: before checking a one-time
        code; on a right code, ``clear_flow``."""
        return self.record_flow_attempt(
            realm, identifier, Flow.SECOND_FACTOR, attempt_id=attempt_id, traceparent=traceparent, tracestate=tracestate
        )

    def recovery_code_attempt(
        self, realm: str, identifier: str, *, attempt_id: str | None = None, traceparent: str | None = None, tracestate: str | None = None
    ) -> Answer:
        """``record_flow_attempt(..., Flow.RECOVERY_CODE)``: before checking a recovery
        code; on a right code, ``clear_flow``."""
        return self.record_flow_attempt(
            realm, identifier, Flow.RECOVERY_CODE, attempt_id=attempt_id, traceparent=traceparent, tracestate=tracestate
        )

    def password_reset_request(
        self,
        realm: str,
        identifier: str,
        *,
        client_key: str,
        attempt_id: str | None = None,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> Answer:
        """``record_flow_attempt(..., Flow.PASSWORD_RESET)``: before sending a reset
        mail. Send one only on ``ALLOW`` *and* when the account exists; answer the user
        with the same page either way."""
        return self.record_flow_attempt(
            realm, identifier, Flow.PASSWORD_RESET, client_key=client_key, attempt_id=attempt_id, traceparent=traceparent, tracestate=tracestate
        )

    def verification_resend_request(
        self,
        realm: str,
        identifier: str,
        *,
        client_key: str,
        attempt_id: str | None = None,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> Answer:
        """``record_flow_attempt(..., Flow.VERIFICATION_RESEND)``: before resending an
        address-verification mail; send it only on ``ALLOW``."""
        return self.record_flow_attempt(
            realm, identifier, Flow.VERIFICATION_RESEND, client_key=client_key, attempt_id=attempt_id, traceparent=traceparent, tracestate=tracestate
        )

    def clear_flow(
        self, realm: str, identifier: str, flow: Flow, *, traceparent: str | None = None, tracestate: str | None = None
    ) -> Answer:
        """``ClearFlow``: a code of ``flow`` (``SECOND_FACTOR`` or ``RECOVERY_CODE``) was
        verified; ``ALLOW`` when the daemon cleared its record. A mail flow is refused
        by the daemon (``INVALID_ARGUMENT``, a deny). Clears nothing of the login
        throttle (that is ``clear_attempts``)."""
        return self._run("ClearFlow", lambda: _core.clear_flow_call(realm, identifier, flow), traceparent, tracestate)

    def route(self, client_key: str) -> str | None:
        """The endpoint a ``verify`` for ``client_key`` would go to now; ``None`` when
        the breaker is open."""
        return self._core.route(client_key)

    def stats(self) -> ClientStats:
        return self._core.stats()

    # the call loop ------------------------------------------------------------
    def _run(self, method: str, build, traceparent: str | None, tracestate: str | None) -> Any:
        try:
            call = build()
        except BadInput as e:
            return _core.bad_input_result(method, e)
        try:
            with call_span(method, traceparent, tracestate) as trace:
                result = self._try_endpoints(call, self._core.metadata(trace))
        except Exception as e:  # noqa: BLE001 - every failure is a deny
            return _core.local_error(call, e)
        return result

    def _try_endpoints(self, call: Call, metadata: tuple[tuple[str, str], ...]) -> Any:
        core = self._core
        core.start_call()
        deadline = time.monotonic() + core.config.call_timeout
        tried: list[int] = []
        while True:
            pick = core.pool.pick(call.route, tried)
            if pick is None:
                if not tried:
                    core.breaker_denial()
                    return call.on_failure(Failed(Failure.BREAKER_OPEN))
                return call.on_failure(Failed(Failure.TRANSPORT))
            tried.append(pick)
            left = deadline - time.monotonic()
            if left <= 0:
                failed = Failed(Failure.TIMEOUT)
            else:
                rpc = getattr(self._stub(pick), call.method)
                try:
                    response = rpc(call.request, timeout=left, metadata=metadata, wait_for_ready=False)
                except grpc.RpcError as e:
                    failed = classify(e, time.monotonic() >= deadline)
                else:
                    core.pool.answered(pick)
                    return call.interpret(response)
            if failed.kind is Failure.ANSWERED:
                core.pool.answered(pick)
                return call.on_failure(failed)
            core.transport_failure(pick, call.method, failed)
            if not core.may_retry(failed, len(tried), deadline - time.monotonic()):
                return call.on_failure(failed)
