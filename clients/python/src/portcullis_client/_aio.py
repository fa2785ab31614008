"""The asyncio client, for asyncio gateways (ASGI: Starlette, FastAPI, aiohttp)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
import grpc.aio

from . import _core
from ._answer import Answer, ClearReason, Failed, Failure, Flow, PasswordCheck
from ._classify import classify
from ._config import ClientConfig
from ._core import BadInput, Call, ClientStats, Core
from ._pb import governor_pb2_grpc as pbg
from ._trace import call_span

# How long past the call deadline the client waits for grpc's own deadline to fire
# before it gives up on the try itself.
_GRACE = 0.05


class AsyncClient:
    """The asyncio twin of :class:`Client`: the same answers, the same retries. Use it
    from one event loop; channels are created on the first call to each endpoint."""

    def __init__(self, config: ClientConfig | None = None) -> None:
        self._core = Core(config)
        self._channels: list[grpc.aio.Channel | None] = [None] * len(self._core.targets)
        self._stubs: list[pbg.GovernorStub | None] = [None] * len(self._core.targets)
        self._closed = False

    def __repr__(self) -> str:
        return f"AsyncClient(endpoints={list(self._core.config.endpoints)!r})"

    async def close(self) -> None:
        self._closed = True
        channels, self._channels = self._channels, [None] * len(self._channels)
        self._stubs = [None] * len(self._stubs)
        for channel in channels:
            if channel is not None:
                await channel.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _stub(self, index: int) -> pbg.GovernorStub:
        if self._closed:
            raise RuntimeError("client closed")
        stub = self._stubs[index]
        if stub is None:
            target, secure = self._core.targets[index]
            if secure:
                channel = grpc.aio.secure_channel(target, self._core.credentials, options=self._core.options)
            else:
                channel = grpc.aio.insecure_channel(target, options=self._core.options)
            self._channels[index] = channel
            stub = self._stubs[index] = pbg.GovernorStub(channel)
        return stub

    async def admit(self, realm: str, identifier: str, *, traceparent: str | None = None, tracestate: str | None = None) -> Answer:
        return await self._run("Admit", lambda: _core.admit_call(realm, identifier), traceparent, tracestate)

    async def record_attempt(
        self,
        realm: str,
        identifier: str,
        *,
        client_key: str = "",
        attempt_id: str | None = None,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> Answer:
        return await self._run(
            "RecordAttempt",
            lambda: _core.record_attempt_call(realm, identifier, client_key, attempt_id),
            traceparent,
            tracestate,
        )

    async def verify(
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
        return await self._run(
            "Verify",
            lambda: _core.verify_call(realm, identifier, password, stored_hash, client_key, attempt_id, device_token),
            traceparent,
            tracestate,
        )

    async def clear_attempts(
        self,
        realm: str,
        identifier: str,
        reason: ClearReason,
        *,
        client_key: str = "",
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> Answer:
        return await self._run(
            "ClearAttempts",
            lambda: _core.clear_attempts_call(realm, identifier, reason, client_key),
            traceparent,
            tracestate,
        )

    async def check_password(
        self, realm: str, identifier: str, password: str | bytes, *, traceparent: str | None = None, tracestate: str | None = None
    ) -> PasswordCheck:
        return await self._run(
            "CheckPassword", lambda: _core.check_password_call(realm, identifier, password), traceparent, tracestate
        )

    async def confirm_device(
        self,
        *,
        realm: str,
        identifier: str,
        challenge_token: str,
        stored_hash: str,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> Answer:
        return await self._run(
            "ConfirmDevice",
            lambda: _core.confirm_device_call(realm, identifier, challenge_token, stored_hash),
            traceparent,
            tracestate,
        )

    async def record_flow_attempt(
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
        return await self._run(
            "RecordFlowAttempt",
            lambda: _core.record_flow_attempt_call(realm, identifier, flow, client_key, attempt_id),
            traceparent,
            tracestate,
        )

    async def second_factor_attempt(
        self, realm: str, identifier: str, *, attempt_id: str | None = None, traceparent: str | None = None, tracestate: str | None = None
    ) -> Answer:
        return await self.record_flow_attempt(
            realm, identifier, Flow.SECOND_FACTOR, attempt_id=attempt_id, traceparent=traceparent, tracestate=tracestate
        )

    async def recovery_code_attempt(
        self, realm: str, identifier: str, *, attempt_id: str | None = None, traceparent: str | None = None, tracestate: str | None = None
    ) -> Answer:
        return await self.record_flow_attempt(
            realm, identifier, Flow.RECOVERY_CODE, attempt_id=attempt_id, traceparent=traceparent, tracestate=tracestate
        )

    async def password_reset_request(
        self,
        realm: str,
        identifier: str,
        *,
        client_key: str,
        attempt_id: str | None = None,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> Answer:
        return await self.record_flow_attempt(
            realm, identifier, Flow.PASSWORD_RESET, client_key=client_key, attempt_id=attempt_id, traceparent=traceparent, tracestate=tracestate
        )

    async def verification_resend_request(
        self,
        realm: str,
        identifier: str,
        *,
        client_key: str,
        attempt_id: str | None = None,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> Answer:
        return await self.record_flow_attempt(
            realm, identifier, Flow.VERIFICATION_RESEND, client_key=client_key, attempt_id=attempt_id, traceparent=traceparent, tracestate=tracestate
        )

    async def clear_flow(
        self, realm: str, identifier: str, flow: Flow, *, traceparent: str | None = None, tracestate: str | None = None
    ) -> Answer:
        return await self._run("ClearFlow", lambda: _core.clear_flow_call(realm, identifier, flow), traceparent, tracestate)

    def route(self, client_key: str) -> str | None:
        return self._core.route(client_key)

    def stats(self) -> ClientStats:
        return self._core.stats()

    async def _run(self, method: str, build, traceparent: str | None, tracestate: str | None) -> Any:
        try:
            call = build()
        except BadInput as e:
            return _core.bad_input_result(method, e)
        try:
            with call_span(method, traceparent, tracestate) as trace:
                return await self._try_endpoints(call, self._core.metadata(trace))
        except asyncio.CancelledError:
            raise  # the caller cancelled its own request: not ours to answer
        except Exception as e:  # noqa: BLE001 - every failure is a deny
            return _core.local_error(call, e)

    async def _try_endpoints(self, call: Call, metadata: tuple[tuple[str, str], ...]) -> Any:
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
                    response = await asyncio.wait_for(
                        rpc(call.request, timeout=left, metadata=metadata, wait_for_ready=False),
                        left + _GRACE,
                    )
                except grpc.RpcError as e:
                    failed = classify(e, time.monotonic() >= deadline)
                except asyncio.TimeoutError:
                    failed = Failed(Failure.TIMEOUT)
                else:
                    core.pool.answered(pick)
                    return call.interpret(response)
            if failed.kind is Failure.ANSWERED:
                core.pool.answered(pick)
                return call.on_failure(failed)
            core.transport_failure(pick, call.method, failed)
            if not core.may_retry(failed, len(tried), deadline - time.monotonic()):
                return call.on_failure(failed)
