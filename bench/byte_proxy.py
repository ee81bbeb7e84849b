"""A loopback TCP proxy that counts the bytes it forwards each way: what the app sends to the model and gets back.

On AWS the functions reach the model endpoint through the NAT gateway, which bills every byte it processes in both
directions, so the bytes that cross this proxy (HTTP headers, request bodies, the streamed answer) are the ones to
price. Over TLS a few hundred bytes per connection more would cross it (the handshake), which this proxy, being
plain TCP, does not see.
"""

from __future__ import annotations

import socket
import threading
from types import TracebackType


class CountingProxy:
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
        self._closed = False
        self._open: set[socket.socket] = set()
        self._thread = threading.Thread(target=self._accept, name="byte-proxy", daemon=True)

    def snapshot(self) -> tuple[int, int, int]:
        """(sent, received, connections) so far."""
        with self._lock:
            return self.sent, self.received, self.connections

    def start(self) -> CountingProxy:
        self._thread.start()
        return self

    def close(self) -> None:
        self._closed = True
        with self._lock:
            sockets, self._open = list(self._open), set()
        for sock in [*sockets, self._listener]:
            _close(sock)
        self._thread.join(5)

    def __enter__(self) -> CountingProxy:
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
            for sock in (source, sink):
                _close(sock)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
