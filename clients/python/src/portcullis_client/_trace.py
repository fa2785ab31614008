"""W3C trace context (``traceparent``, ``tracestate``) into every try's gRPC metadata,
so the daemon's RPC span joins the gateway's trace (docs/observability.md, "Traces").

A caller may pass its own ``traceparent`` (and ``tracestate``); otherwise, when
``opentelemetry-api`` is installed, each call is a client span
``portcullis.v1.Governor/<Method>`` whose context the global propagator writes. With
neither, nothing is written. Malformed values are dropped, never sent: trace context
must not be able to fail a login.
"""

from __future__ import annotations

import contextlib
import logging
import re
import types
from collections.abc import Iterator
from typing import TypeGuard

log = logging.getLogger("portcullis_client")

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")

_otel_propagate: types.ModuleType | None
_otel_trace: types.ModuleType | None
try:  # optional: the gateway's OpenTelemetry, if it has one
    from opentelemetry import propagate as _otel_propagate
    from opentelemetry import trace as _otel_trace
except ImportError:  # pragma: no cover - exercised when opentelemetry-api is absent
    _otel_propagate = None
    _otel_trace = None


def valid_traceparent(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a W3C ``traceparent`` (version 00-fe, non-zero ids)."""
    if not isinstance(value, str):
        return False
    m = _TRACEPARENT.match(value)
    if m is None:
        return False
    version, trace_id, parent_id, _ = m.groups()
    return version != "ff" and trace_id != "0" * 32 and parent_id != "0" * 16


def _valid_tracestate(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 512 and all(0x20 <= ord(c) <= 0x7E for c in value)


def caller_metadata(traceparent: str | None, tracestate: str | None) -> list[tuple[str, str]]:
    """The caller's own trace context, when well formed."""
    if not valid_traceparent(traceparent):
        log.debug("portcullis: a traceparent that is not W3C trace context was dropped")
        return []
    md = [("traceparent", traceparent)]
    if tracestate is not None and _valid_tracestate(tracestate):
        md.append(("tracestate", tracestate))
    return md


def _otel_metadata() -> list[tuple[str, str]]:
    if _otel_propagate is None:
        return []
    carrier: dict[str, str] = {}
    try:
        _otel_propagate.inject(carrier)
    except Exception:  # noqa: BLE001 - a broken propagator must not fail a login
        return []
    md: list[tuple[str, str]] = []
    tp = carrier.get("traceparent")
    if valid_traceparent(tp):
        md.append(("traceparent", tp))
        ts = carrier.get("tracestate")
        if ts is not None and _valid_tracestate(ts):
            md.append(("tracestate", ts))
    return md


@contextlib.contextmanager
def call_span(method: str, traceparent: str | None, tracestate: str | None) -> Iterator[list[tuple[str, str]]]:
    """The trace metadata of one logical call (the same on every try), inside the call's
    client span when OpenTelemetry is installed and the caller gave no traceparent."""
    if traceparent is not None:
        yield caller_metadata(traceparent, tracestate)
        return
    if _otel_trace is None:
        yield []
        return
    tracer = _otel_trace.get_tracer("portcullis_client")
    with tracer.start_as_current_span(
        f"portcullis.v1.Governor/{method}",
        kind=_otel_trace.SpanKind.CLIENT,
        attributes={"rpc.system": "grpc", "rpc.service": "portcullis.v1.Governor", "rpc.method": method},
    ):
        yield _otel_metadata()
