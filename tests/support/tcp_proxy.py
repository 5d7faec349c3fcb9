"""A TCP proxy on loopback that can be *closed* (connections refused at once) and reopened.

Clients keep one address while the server behind it restarts. While closed, every connection is
accepted and closed immediately (the client sees "unavailable" and retries), and open ones are
cut. A test reopens it only once the restarted server is ready for them (e.g. its topics and
subscriptions were recreated), so no client meets a half-initialised server.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType


class TcpProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._open = threading.Event()
        self._open.set()
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close_gate(self) -> None:
        """Refuse new connections and cut the open ones."""
        self._open.clear()
        self._cut_all()

    def open_gate(self) -> None:
        self._open.set()

    def _cut_all(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self._open.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets.update((client, upstream))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        # One side ended: end both, so the client notices the server went away.
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> TcpProxy:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stopping.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept() on Linux
        self._listener.close()
        self._cut_all()
        self._thread.join(timeout=10)
