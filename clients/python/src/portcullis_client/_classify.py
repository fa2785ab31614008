"""Telling a status the daemon sent from one grpc made up from a transport error.

tonic marks the latter by an attached source error; grpcio does not: both arrive as a
``grpc.RpcError`` with a code and a details string, and since grpc 1.6x the debug string
no longer says "Error received from peer". The client therefore recognises grpc core's
own wording for transport failures. The list errs towards *not* retrying: a wording it
does not know is taken as an answered status (a deny, never retried, no health failure),
which can only cost a retry, never turn a failure into an allow. tests/test_conformance.py
runs every transport fault of clients/conformance.json against the installed grpcio, so
a grpc release that words them differently fails the tests.
"""

from __future__ import annotations

import grpc

from ._answer import Failed, Failure

# grpc core's wording for failures of the connection or the HTTP/2 stream under a call
# (connect refused or timed out, reset, closed, GOAWAY, broken frames, a peer that does
# not speak HTTP/2), never the text of a status a server sent.
_TRANSPORT_WORDING = (
    "failed to connect to all addresses",
    "connections to all backends failing",
    "stream removed",
    "socket closed",
    "connection reset",
    "connection refused",
    "broken pipe",
    "goaway",
    "received rst_stream",
    "failed parsing http/2",
    "trying to connect an http1.x server",
    "transport closed",
    "connection closed",
    "endpoint closing",
    "keepalive watchdog timeout",
    "handshake failed",
    "ssl_error",
    "dns resolution failed",
    "recvmsg:",
    "sendmsg:",
    "failed to connect to remote host",
)

_TRANSPORT_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.CANCELLED,
    }
)


def classify(error: grpc.RpcError, deadline_passed: bool) -> Failed:
    """How one try ended: TIMEOUT (our deadline), TRANSPORT, or ANSWERED with the code."""
    try:
        code = error.code()
        sent = str(error.details() or "")
        details = sent.lower()
    except Exception:  # noqa: BLE001 - an RpcError that is no Call: the call never got an answer
        return Failed(Failure.TRANSPORT)
    own_deadline = details in ("deadline exceeded", "stream removed (deadline exceeded)")
    if code is grpc.StatusCode.DEADLINE_EXCEEDED and (deadline_passed or own_deadline):
        return Failed(Failure.TIMEOUT)
    if code in _TRANSPORT_CODES and any(w in details for w in _TRANSPORT_WORDING):
        # The details are kept only to explain a TLS failure (_tls.py).
        return Failed(Failure.TRANSPORT, details=sent)
    return Failed(Failure.ANSWERED, code, sent)
