"""An HTTP proxy that forwards every request, then answers 500 to some of them.

It stands between a Pub/Sub push subscription and the ingress function: the function *did*
process the message, but Pub/Sub sees a failure and delivers it again - the "effect done, ack
lost" case that deduplication exists for.
"""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType


class FlakyProxy:
    """Forwards POSTs to ``upstream_port``; every ``fail_every``-th answer becomes a 500.

    With ``fail_first_per_task=N`` it instead refuses (500, not forwarded) the first N attempts
    of each Cloud Tasks task, as a relay that fails twice before succeeding would.
    """

    def __init__(
        self, upstream_port: int, *, fail_every: int = 0, fail_first_per_task: int = 0
    ) -> None:
        self.upstream_port = upstream_port
        self.fail_every = fail_every
        self.fail_first_per_task = fail_first_per_task
        self.forwarded = 0
        self.failed = 0
        self.attempts: dict[str, int] = {}
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                task = self.headers.get("X-CloudTasks-TaskName", "")
                with proxy._lock:
                    proxy.attempts[task] = proxy.attempts.get(task, 0) + 1
                    refuse = task and proxy.attempts[task] <= proxy.fail_first_per_task
                    proxy.failed += bool(refuse)
                if refuse:
                    self.send_response(500)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                conn = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                conn.request("POST", self.path, body=body, headers=headers)
                upstream = conn.getresponse()
                upstream.read()
                conn.close()
                with proxy._lock:
                    proxy.forwarded += 1
                    fail = proxy.fail_every > 0 and proxy.forwarded % proxy.fail_every == 0
                    proxy.failed += fail
                status = 500 if fail else upstream.status
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                return  # keep test output quiet

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def __enter__(self) -> FlakyProxy:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
