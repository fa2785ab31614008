"""Fault-injecting endpoints for the conformance table (clients/conformance.json).

- ``AnswerEndpoint``: a grpcio server that answers every Governor method with the
  case's message fields (enum values as raw ints), or aborts with a status, or answers
  too late; it records each request's method, attempt_id and metadata.
- ``RawEndpoint``: a TCP listener speaking just enough HTTP/2 to receive a request,
  then resetting the connection ("reset"), or writing bytes that are not HTTP/2
  ("garbage"); it records the attempt_id of each request it received.
- ``closed_port()``: an address where nothing listens ("unreachable").
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from concurrent import futures

import grpc

from portcullis_client._pb import governor_pb2 as pb

REQUESTS = {
    "Admit": pb.AdmitRequest,
    "RecordAttempt": pb.RecordAttemptRequest,
    "Verify": pb.VerifyRequest,
    "ClearAttempts": pb.ClearAttemptsRequest,
    "CheckPassword": pb.CheckPasswordRequest,
    "RecordFlowAttempt": pb.RecordFlowAttemptRequest,
    "ClearFlow": pb.ClearFlowRequest,
    "ConfirmDevice": pb.ConfirmDeviceRequest,
}
RESPONSES = {
    "Admit": pb.AdmitResponse,
    "RecordAttempt": pb.RecordAttemptResponse,
    "Verify": pb.VerifyResponse,
    "ClearAttempts": pb.ClearAttemptsResponse,
    "CheckPassword": pb.CheckPasswordResponse,
    "RecordFlowAttempt": pb.RecordFlowAttemptResponse,
    "ClearFlow": pb.ClearFlowResponse,
    "ConfirmDevice": pb.ConfirmDeviceResponse,
}


class Seen:
    """What an endpoint received: one entry per request (method, attempt_id, metadata),
    and the ``flow`` of each request that has one."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: list[tuple[str, str | None, dict[str, str]]] = []
        self.flows: list[int] = []
        self.connections = 0

    def add(self, method: str, request, metadata: dict[str, str]) -> None:
        attempt_id = getattr(request, "attempt_id", None) if request is not None else None
        flow = getattr(request, "flow", None) if request is not None else None
        with self.lock:
            self.requests.append((method, attempt_id, metadata))
            if flow is not None:
                self.flows.append(flow)

    def attempt_ids(self) -> list[str]:
        with self.lock:
            return [a for _, a, _ in self.requests if a is not None]


class AnswerEndpoint:
    def __init__(self, answer: dict | None = None, status: int | None = None, delay_ms: int | None = None) -> None:
        self.seen = Seen()
        self.answer, self.status, self.delay_ms = answer or {}, status, delay_ms
        known = {f for r in RESPONSES.values() for f in r.DESCRIPTOR.fields_by_name}
        if set(self.answer) - known:
            raise ValueError(f"no response has the fields {sorted(set(self.answer) - known)}")
        handlers = {m: self._handler(m) for m in REQUESTS}
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("portcullis.v1.Governor", handlers),))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        self.url = f"http://127.0.0.1:{self.port}"

    def _handler(self, method: str):
        def handle(request, context: grpc.ServicerContext):
            self.seen.add(method, request, dict(context.invocation_metadata()))
            if self.delay_ms is not None:
                end = time.monotonic() + self.delay_ms / 1000
                while time.monotonic() < end and context.is_active():
                    time.sleep(0.01)
            if self.status is not None:
                context.abort(grpc.StatusCode[_code_name(self.status)], "refused by the fault endpoint")
            # The answer's fields this method's response has (one answer may serve
            # several methods); enum values go in as raw ints.
            response = RESPONSES[method]
            return response(**{k: v for k, v in self.answer.items() if k in response.DESCRIPTOR.fields_by_name})

        return grpc.unary_unary_rpc_method_handler(
            handle,
            request_deserializer=REQUESTS[method].FromString,
            response_serializer=RESPONSES[method].SerializeToString,
        )

    def close(self) -> None:
        self.server.stop(grace=0)


def _code_name(value: int) -> str:
    for code in grpc.StatusCode:
        if code.value[0] == value:
            return code.name
    raise ValueError(value)


SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # an empty SETTINGS frame
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def _recv_exact(conn: socket.socket, n: int, buf: bytearray) -> bytes | None:
    while len(buf) < n:
        data = conn.recv(65536)
        if not data:
            return None
        buf.extend(data)
    out = bytes(buf[:n])
    del buf[:n]
    return out


class RawEndpoint:
    """mode "reset": read the request (HEADERS then DATA with END_STREAM), record its
    attempt_id, close the socket with a TCP reset before any answer. mode "garbage":
    write bytes that are not HTTP/2."""

    def __init__(self, mode: str, method: str) -> None:
        self.mode, self.method = mode, method
        self.seen = Seen()
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self.seen.lock:
                self.seen.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        try:
            if self.mode == "garbage":
                conn.sendall(b"this is not HTTP/2 at all\r\n" * 8)
                try:
                    while conn.recv(65536):
                        pass
                except OSError:
                    pass
                return
            buf = bytearray()
            if _recv_exact(conn, len(PREFACE), buf) != PREFACE:
                return
            conn.sendall(SETTINGS)
            body = bytearray()
            while True:
                header = _recv_exact(conn, 9, buf)
                if header is None:
                    return
                length = int.from_bytes(header[:3], "big")
                kind, flags = header[3], header[4]
                payload = _recv_exact(conn, length, buf)
                if payload is None:
                    return
                if kind == 0x4 and not flags & 0x1:  # SETTINGS: acknowledge
                    conn.sendall(b"\x00\x00\x00\x04\x01\x00\x00\x00\x00")
                if kind == 0x0:  # DATA
                    if flags & 0x8:  # PADDED
                        payload = payload[1 : len(payload) - payload[0]]
                    body.extend(payload)
                    if flags & 0x1:  # END_STREAM: the whole request arrived
                        break
            request = None
            if len(body) >= 5:
                (size,) = struct.unpack(">I", bytes(body[1:5]))
                request = REQUESTS[self.method].FromString(bytes(body[5 : 5 + size]))
            self.seen.add(self.method, request, {})
            # A reset, not a polite close: SO_LINGER 0 sends RST.
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self._stop = True
        self.listener.close()


class ClosedPort:
    def __init__(self) -> None:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        self.url = f"http://127.0.0.1:{self.port}"
        self.seen = Seen()

    def close(self) -> None:
        pass


def endpoint_for(case: dict):
    fault = case.get("fault")
    if fault is None:
        return AnswerEndpoint(answer=case["answer"])
    if "status" in fault:
        return AnswerEndpoint(status=fault["status"])
    if "delay_ms" in fault:
        # A late answer that would have been an allow: still a deny.
        late = {
            "Verify": {"verdict": 1},
            "ClearAttempts": {},
            "ClearFlow": {},
            "CheckPassword": {"reason": 1},
            "ConfirmDevice": {"device_token": "late-device-token"},
        }.get(case["rpc"], {"decision": 1})
        return AnswerEndpoint(answer=late, delay_ms=fault["delay_ms"])
    if fault.get("reset"):
        return RawEndpoint("reset", case["rpc"])
    if fault.get("garbage"):
        return RawEndpoint("garbage", case["rpc"])
    if fault.get("unreachable"):
        return ClosedPort()
    raise ValueError(f"unknown fault in case {case['name']!r}: {fault}")
