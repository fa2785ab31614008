"""W3C trace context in each try's metadata: the caller's own traceparent, or the
current OpenTelemetry span's; a malformed one is dropped, never fails the call."""

from __future__ import annotations

import pytest

from calls import call_async, call_sync
from faults import AnswerEndpoint
from portcullis_client import AsyncClient, Client, ClientConfig, Decision

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def config(url: str) -> ClientConfig:
    return ClientConfig(endpoints=(url,), call_timeout=1.0)


def test_the_callers_traceparent_is_sent() -> None:
    e = AnswerEndpoint(answer=dict(decision=1))
    try:
        with Client(config(e.url)) as c:
            a = call_sync(c, "RecordAttempt", traceparent=TP, tracestate="vendor=1")
    finally:
        e.close()
    assert a.decision is Decision.ALLOW
    md = e.seen.requests[0][2]
    assert md["traceparent"] == TP and md["tracestate"] == "vendor=1"


@pytest.mark.parametrize("bad", ["not-a-traceparent", "00-" + "0" * 32 + "-00f067aa0ba902b7-01", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "x\n"])
@pytest.mark.asyncio
async def test_a_malformed_traceparent_is_dropped_and_the_call_goes_on(bad: str) -> None:
    e = AnswerEndpoint(answer=dict(decision=1))
    try:
        async with AsyncClient(config(e.url)) as c:
            a = await call_async(c, "Admit", traceparent=bad)
    finally:
        e.close()
    assert a.decision is Decision.ALLOW
    assert "traceparent" not in e.seen.requests[0][2]


def test_the_current_opentelemetry_span_is_the_parent() -> None:
    trace = pytest.importorskip("opentelemetry.trace")
    sdk = pytest.importorskip("opentelemetry.sdk.trace")
    export = pytest.importorskip("opentelemetry.sdk.trace.export")
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = sdk.TracerProvider()
    provider.add_span_processor(export.SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("gateway")
    e = AnswerEndpoint(answer=dict(verdict=1))
    try:
        # The client asks the global provider; install ours for this test only.
        original = trace.get_tracer_provider
        trace.get_tracer_provider = lambda: provider
        try:
            with tracer.start_as_current_span("login") as login_span, Client(config(e.url)) as c:
                call_sync(c, "Verify")
        finally:
            trace.get_tracer_provider = original
    finally:
        e.close()
    sent = e.seen.requests[0][2]["traceparent"]
    _, trace_id, parent_id, _ = sent.split("-")
    assert trace_id == format(login_span.get_span_context().trace_id, "032x")
    spans = {s.name: s for s in exporter.get_finished_spans()}
    client_span = spans["portcullis.v1.Governor/Verify"]
    assert client_span.kind is trace.SpanKind.CLIENT
    assert client_span.parent.span_id == login_span.get_span_context().span_id
    assert parent_id == format(client_span.context.span_id, "016x")


def test_without_a_span_or_a_traceparent_nothing_is_sent() -> None:
    e = AnswerEndpoint(answer=dict(decision=1))
    try:
        with Client(config(e.url)) as c:
            call_sync(c, "Admit")
    finally:
        e.close()
    assert "traceparent" not in e.seen.requests[0][2]
