"""A TCP proxy in front of the daemon that cuts the first connection at the daemon's
first answer: it forwards the request, and when the daemon's response HEADERS frame
arrives (the daemon has counted the attempt) it resets the gateway's connection
instead of forwarding it. Later connections are forwarded untouched.

With ``cut_connections=0`` it forwards every connection and counts them
(``connections``); ``upstream_port`` may be changed at any time, and connections
accepted from then on go to the new port while older ones stay where they were."""

from __future__ import annotations

import socket
import struct
import threading


class CuttingProxy:
    def __init__(self, upstream_port: int, cut_connections: int = 1) -> None:
        self.upstream_port = upstream_port
        self.cut_left = cut_connections
        self.connections = 0
        self.cuts = 0
        self.lock = threading.Lock()
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
                cut = self.cut_left > 0
                self.cut_left -= 1 if cut else 0
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
            target = self._cut_at_answer if cut else self._pump
            threading.Thread(target=target, args=(upstream, client), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            # Wake the other direction's reader; each socket is closed by its reader.
            try:
                dst.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            src.close()

    def _cut_at_answer(self, upstream: socket.socket, client: socket.socket) -> None:
        buf = bytearray()
        try:
            while data := upstream.recv(65536):
                buf.extend(data)
                while len(buf) >= 9:
                    length = int.from_bytes(buf[:3], "big")
                    if len(buf) < 9 + length:
                        break
                    frame, kind = bytes(buf[: 9 + length]), buf[3]
                    del buf[: 9 + length]
                    if kind == 0x1:  # HEADERS: the daemon's answer begins
                        with self.lock:
                            self.cuts += 1
                        # Linger 0: the client's socket ends in a TCP reset. Shutting it
                        # down wakes its reader (the other pump), which closes it.
                        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                        client.shutdown(socket.SHUT_RDWR)
                        upstream.close()
                        return
                    client.sendall(frame)
        except OSError:
            pass

    def close(self) -> None:
        self.listener.close()
