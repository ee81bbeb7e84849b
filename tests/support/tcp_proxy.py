"""A TCP proxy on loopback that counts the bytes it forwards each way, and that a test can cut and restore.

Cut and restored (``CuttableProxy``): a network partition between the app and Redis. Redis keeps its data while the
proxy is cut (unlike stopping the server), so the test sees what a client sees when its cache node is unreachable
for a while: connections reset, new ones refused, then everything back.

Counted (``bench/turn_counts.py``): what the app sends to the model and gets back. On AWS the functions reach the
model endpoint through the NAT gateway, which bills every byte it processes in both directions, so the bytes that
cross this proxy (HTTP headers, request bodies, the streamed answer) are the ones to price. Over TLS a few hundred
bytes per connection more would cross it (the handshake), which this proxy, being plain TCP, does not see.
"""

from __future__ import annotations

import socket
import threading
from types import TracebackType
from typing import Self


class LoopbackProxy:
    """Forwards every connection on ``port`` to ``target``; ``sent`` counts client-to-target bytes, ``received``
    target-to-client bytes, ``connections`` the connections accepted."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self.sent = 0
        self.received = 0
        self.connections = 0
        self._open: set[socket.socket] = set()
        self._down = False
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="tcp-proxy", daemon=True)

    def snapshot(self) -> tuple[int, int, int]:
        """(sent, received, connections) so far."""
        with self._lock:
            return self.sent, self.received, self.connections

    def start(self) -> Self:
        self._thread.start()
        return self

    def cut(self) -> None:
        """Reset every open connection and refuse new ones until ``restore``."""
        with self._lock:
            self._down = True
            sockets, self._open = list(self._open), set()
        for sock in sockets:
            _close(sock)

    def restore(self) -> None:
        with self._lock:
            self._down = False

    def close(self) -> None:
        self._closed = True
        self.cut()
        _close(self._listener)
        self._thread.join(5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                down = self._down
            if down:
                _close(client)
                continue
            try:
                upstream = socket.create_connection(self._target, timeout=5)
            except OSError:
                _close(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                self.connections += 1
                self._open.update((client, upstream))
            for source, sink, upward in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(target=self._pump, args=(source, sink, upward), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, upward: bool) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
                with self._lock:
                    if upward:
                        self.sent += len(data)
                    else:
                        self.received += len(data)
        except OSError:
            pass
        finally:
            _close(source)
            _close(sink)


class CuttableProxy(LoopbackProxy):
    """The proxy in front of a redis-server, with the URL a client connects to."""

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
