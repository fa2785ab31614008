"""The asyncio client, for asyncio gateways (ASGI: Starlette, FastAPI, aiohttp).

This file is the one source of both clients: ``scripts/unasync.py`` writes ``_sync.py``
(the blocking :class:`Client`) from it by a fixed list of substitutions (``async def``
to ``def``, ``await`` dropped, ``AsyncClient`` to ``Client``, ``_io.async_x`` to
``_io.x``, ...), and ``tests/test_unasync.py`` and ``.ci/run`` fail when the committed
``_sync.py`` is not what the script writes today. Edit this file, then run
``python scripts/unasync.py``.

Why generated rather than two thin shells over ``_core.py``: what ``_core.py`` holds
(input checks, requests, answers, routing, health, retries) is already shared; what is
left here is the public API (thirteen methods whose signatures and docstrings are the
documentation) and the retry loop, which must ``await`` in one client and block in the
other. Thin shells would still repeat every signature and docstring by hand, or hide
them behind a generic type that reads badly in an editor; a sans-IO generator loop would
make the retry loop harder to read than the loop itself. A generated file keeps one
text of each method with real signatures in both classes, and the difference between
them is the substitution list in ``scripts/unasync.py`` and the function pairs of
``_io.py``. This file is written so that the generated one is formatted as ``ruff
format`` wants it too (``.ci/run`` checks both).
"""

from __future__ import annotations

from typing import Any, TypeVar

import grpc

from . import _core, _io
from ._answer import Answer, ClearReason, Failed, Failure, Flow, PasswordCheck
from ._classify import classify
from ._config import ClientConfig
from ._core import Call, ClientStats, Core
from ._pb import governor_pb2_grpc as pbg
from ._process import ChannelSet
from ._trace import call_span

T = TypeVar("T")


class AsyncClient:
    """The gateway's handle to the daemon fleet, for asyncio gateways. Use one
    ``AsyncClient`` per event loop.

    Every method answers; none raises for anything that happens between gateway and
    daemon (docs/client.md, "Every outcome"): a refused or reset connection, a timeout,
    an open breaker, an error status, an unknown enum value and bad input all arrive as a
    deny. Channels are built on the first call to each endpoint, in the process that
    makes it: a client made before ``fork()`` builds its own channels in each child and
    never uses the parent's.
    """

    def __init__(self, config: ClientConfig | None = None) -> None:
        """``config`` defaults to ``ClientConfig()``; a file it names (TLS, token) that
        cannot be read raises :class:`ConfigError` here."""
        self._core = Core(config)
        self._channels: ChannelSet[Any, Any] = ChannelSet(len(self._core.targets), self._build)

    def __repr__(self) -> str:
        return f"AsyncClient(endpoints={list(self._core.config.endpoints)!r})"

    # lifecycle --------------------------------------------------------------
    async def close(self) -> None:
        """Closes this process's channels; every later call is a deny."""
        for channel in self._channels.close():
            await _io.async_close(channel)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _build(self, index: int) -> tuple[Any, Any]:
        target, secure = self._core.targets[index]
        credentials = self._core.credentials if secure else None
        channel = _io.async_channel(target, credentials, self._core.options)
        return channel, pbg.GovernorStub(channel)  # type: ignore[no-untyped-call]

    # the API ----------------------------------------------------------------
    async def admit(
        self, realm: str, identifier: str, *, traceparent: str | None = None, tracestate: str | None = None
    ) -> Answer:
        """``Admit``: is the account's door open? Never counts."""
        return await self._run(_core.admit_call(realm, identifier), traceparent, tracestate)

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
        """``RecordAttempt``: counts one attempt before the gateway compares the hash
        itself. ``attempt_id`` (generated when ``None``) makes retries idempotent;
        ``client_key`` (see :func:`client_key_from_forwarded`) also takes a token of the
        client network's bucket."""
        call = _core.record_attempt_call(realm, identifier, client_key, attempt_id)
        return await self._run(call, traceparent, tracestate)

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
        """``Verify``: the whole login check. ``stored_hash`` is ``""`` for an unknown or
        disabled account. Routed by ``client_key``."""
        call = _core.verify_call(realm, identifier, password, stored_hash, client_key, attempt_id, device_token)
        return await self._run(call, traceparent, tracestate)

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
        """``ClearAttempts``: allowed when the daemon cleared the record. With
        ``PASSWORD_VERIFIED``, ``client_key`` names the ``record_attempt`` whose password
        matched, whose network token is given back."""
        call = _core.clear_attempts_call(realm, identifier, reason, client_key)
        return await self._run(call, traceparent, tracestate)

    async def check_password(
        self,
        realm: str,
        identifier: str,
        password: str | bytes,
        *,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> PasswordCheck:
        """``CheckPassword`` at set and change time: only ``ACCEPTABLE`` accepts."""
        return await self._run(_core.check_password_call(realm, identifier, password), traceparent, tracestate)

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
        """``ConfirmDevice``, after a ``verify`` answered ``AnswerKind.CHALLENGE`` and the
        gateway's second factor passed: exchanges the challenge token for a device token.
        ``ALLOW`` carries ``device_token`` (set the device cookie, then start the
        session); every failure is a deny without one (``FAILED_PRECONDITION``: the token
        is not valid, another account's or credential's, or older than 15 minutes)."""
        call = _core.confirm_device_call(realm, identifier, challenge_token, stored_hash)
        return await self._run(call, traceparent, tracestate)

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
        """``RecordFlowAttempt``: counts one attempt at ``flow`` for the account *before*
        the gateway acts (checks the code, sends the mail); act only on ``ALLOW``. The
        outcomes of ``record_attempt``: only ``DECISION_ALLOW`` allows, transport
        failures are retried with the same ``attempt_id`` (generated when ``None``).
        ``client_key`` is required for the mail flows; the code flows ignore it."""
        call = _core.record_flow_attempt_call(realm, identifier, flow, client_key, attempt_id)
        return await self._run(call, traceparent, tracestate)

    async def second_factor_attempt(
        self,
        realm: str,
        identifier: str,
        *,
        attempt_id: str | None = None,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> Answer:
        """``record_flow_attempt(..., Flow.SECOND_FACTOR)``: before checking a one-time
        code; on a right code, ``clear_flow``."""
        call = _core.record_flow_attempt_call(realm, identifier, Flow.SECOND_FACTOR, "", attempt_id)
        return await self._run(call, traceparent, tracestate)

    async def recovery_code_attempt(
        self,
        realm: str,
        identifier: str,
        *,
        attempt_id: str | None = None,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> Answer:
        """``record_flow_attempt(..., Flow.RECOVERY_CODE)``: before checking a recovery
        code; on a right code, ``clear_flow``."""
        call = _core.record_flow_attempt_call(realm, identifier, Flow.RECOVERY_CODE, "", attempt_id)
        return await self._run(call, traceparent, tracestate)

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
        """``record_flow_attempt(..., Flow.PASSWORD_RESET)``: before sending a reset
        mail. Send one only on ``ALLOW`` *and* when the account exists; answer the user
        with the same page either way."""
        call = _core.record_flow_attempt_call(realm, identifier, Flow.PASSWORD_RESET, client_key, attempt_id)
        return await self._run(call, traceparent, tracestate)

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
        """``record_flow_attempt(..., Flow.VERIFICATION_RESEND)``: before resending an
        address-verification mail; send it only on ``ALLOW``."""
        call = _core.record_flow_attempt_call(realm, identifier, Flow.VERIFICATION_RESEND, client_key, attempt_id)
        return await self._run(call, traceparent, tracestate)

    async def clear_flow(
        self, realm: str, identifier: str, flow: Flow, *, traceparent: str | None = None, tracestate: str | None = None
    ) -> Answer:
        """``ClearFlow``: a code of ``flow`` (``SECOND_FACTOR`` or ``RECOVERY_CODE``) was
        verified; ``ALLOW`` when the daemon cleared its record. A mail flow is refused
        by the daemon (``INVALID_ARGUMENT``, a deny). Clears nothing of the login
        throttle (that is ``clear_attempts``)."""
        return await self._run(_core.clear_flow_call(realm, identifier, flow), traceparent, tracestate)

    def route(self, client_key: str) -> str | None:
        """The endpoint a ``verify`` for ``client_key`` would go to now; ``None`` when
        the breaker is open."""
        return self._core.route(client_key)

    def stats(self) -> ClientStats:
        """Counters of this client (calls, retries, failures, the breaker, health)."""
        return self._core.stats()

    # the call loop ------------------------------------------------------------
    async def _run(self, call: Call[T], traceparent: str | None, tracestate: str | None) -> T:
        if call.bad_input is not None:
            return _core.refuse_bad_input(call)
        try:
            with call_span(call.method, traceparent, tracestate) as trace:
                return await self._try_endpoints(call, self._core.metadata(trace))
        except Exception as e:  # noqa: BLE001 - every failure is a deny (a cancellation is no Exception)
            return _core.local_error(call, e)

    async def _try_endpoints(self, call: Call[T], metadata: tuple[tuple[str, str], ...]) -> T:
        core = self._core
        core.start_call()
        deadline = core.deadline()
        tried: list[int] = []
        last: tuple[int, Failed] | None = None
        while True:
            pick = core.pool.pick(call.route, tried)
            if pick is None:
                # No endpoint left: the breaker's deny, or the last try's failure.
                return core.no_endpoint(call) if last is None else await self._failed(call, *last, deadline)
            tried.append(pick)
            left = core.time_left(deadline)
            if left <= 0:
                failed = Failed(Failure.TIMEOUT)
            else:
                rpc = getattr(self._channels.stub(pick), call.method)
                try:
                    response = await _io.async_unary(rpc, call.request, left, metadata)
                except grpc.RpcError as e:
                    failed = classify(e, core.time_left(deadline) <= 0)
                except TimeoutError:
                    failed = Failed(Failure.TIMEOUT)
                else:
                    core.answered(pick)
                    return call.interpret(response)
            last = (pick, failed)
            if not core.retry_after(call, pick, failed, len(tried), deadline):
                return await self._failed(call, pick, failed, deadline)

    async def _failed(self, call: Call[T], pick: int, failed: Failed, deadline: float) -> T:
        """The answer to a call whose last try, on endpoint ``pick``, failed. A TLS
        failure of an ``https://`` endpoint is explained when the client can tell
        (``_tls.py``): a diagnostic handshake, when one is due, is waited for at most
        ``connect_timeout`` and never past the call's deadline (one that ends later
        explains later answers)."""
        core = self._core
        diagnosis = core.tls.diagnosis_for(pick, failed)
        if diagnosis is not None:
            await _io.async_wait_diagnosis(diagnosis, core.tls.wait(core.time_left(deadline)))
        return call.on_failure(core.tls.explained(pick, failed))
