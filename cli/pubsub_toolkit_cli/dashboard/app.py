"""The status page's web app: ``/`` (the page), ``/panel`` (what refreshes), ``/status.json``.

Read-only: only GET routes exist. Each request gathers a fresh snapshot, except that requests
closer together than ``min_interval`` share one - listing the dead-letter subscription pulls
(and at once releases) its messages, which should not happen for every open browser tab.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from pubsub_toolkit._extras import import_optional
from pubsub_toolkit_cli.dashboard.render import render_page, render_panel
from pubsub_toolkit_cli.dashboard.snapshot import StatusSnapshot

# The page binds 127.0.0.1 only; checking the Host header as well stops DNS rebinding (a web
# page whose own name resolves to 127.0.0.1 would otherwise read the status, and each request
# pulls and releases the dead letters).
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]"})

if TYPE_CHECKING:
    import flask


class SnapshotCache:
    """Calls ``take`` at most once per ``min_interval`` seconds; concurrent callers share it."""

    def __init__(self, take: Callable[[], StatusSnapshot], *, min_interval: float = 1.0) -> None:
        self._take = take
        self._min_interval = min_interval
        self._lock = threading.Lock()
        self._last: tuple[float, StatusSnapshot] | None = None

    def get(self) -> StatusSnapshot:
        with self._lock:
            now = time.monotonic()
            if self._last is None or now - self._last[0] >= self._min_interval:
                self._last = (now, self._take())
            return self._last[1]


def create_app(
    take: Callable[[], StatusSnapshot], *, refresh_seconds: int = 2, min_interval: float = 1.0
) -> flask.Flask:
    """The app; ``take`` returns a fresh snapshot (see :func:`~.snapshot.gather`)."""
    # Flask is the [dashboard] extra: checked here so its absence names the extra.
    import_optional("flask", extra="dashboard", needed_by="the dashboard")
    from flask import Flask, Response, abort, jsonify, request

    app = Flask(__name__)
    cache = SnapshotCache(take, min_interval=min_interval)

    @app.before_request
    def only_local_hosts() -> None:
        host = request.host.rsplit(":", 1)[0] if not request.host.endswith("]") else request.host
        if host.lower() not in LOCAL_HOSTS:
            abort(403)

    def html(body: str) -> Response:
        response = Response(body, mimetype="text/html")
        response.headers["Cache-Control"] = "no-store"
        response.headers["Content-Security-Policy"] = (
            "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
            "connect-src 'self'; img-src 'self'"
        )
        return response

    @app.get("/")
    def page() -> Response:
        return html(render_page(cache.get(), refresh_seconds=refresh_seconds))

    @app.get("/panel")
    def panel() -> Response:
        return html(render_panel(cache.get()))

    @app.get("/status.json")
    def status_json() -> Response:
        response = jsonify(cache.get().to_json())
        response.headers["Cache-Control"] = "no-store"
        return response

    return app
