"""Restarting a local service on its log directory (``local restart PART``) keeps what the
earlier run logged.

The log was opened for writing, so a restart emptied it: restarting the relay or ingress after
a fault (the how-to's remedy) threw away the very lines that say what happened during it -
the relay's ``relay_gave_up`` ALERTs, ingress's decisions. Found trying the local stack's
fault tooling as a new user: after ``local restart ingress`` its log no longer had a line of
the messages it had handled."""

from __future__ import annotations

import sys
from pathlib import Path

from pubsub_toolkit_local import processes
from pubsub_toolkit_local.processes import ServiceSpec, free_port, start_service


def spec(port: int, run: str) -> ServiceSpec:
    server = (
        "import http.server as h; "
        f"print('run {run}', flush=True); "
        f"h.HTTPServer(('127.0.0.1', {port}), h.BaseHTTPRequestHandler).serve_forever()"
    )
    return ServiceSpec(
        name="probe",
        argv=(sys.executable, "-c", server),
        port=port,
        ready=lambda: not processes.port_is_free(port),
        startup_timeout=30,
    )


def test_a_restarted_service_appends_to_its_log(tmp_path: Path) -> None:
    port = free_port()
    first = start_service(spec(port, "one"), tmp_path)
    first.stop()  # stop() waits for the whole group: its output is flushed and closed
    second = start_service(spec(port, "two"), tmp_path)
    try:
        assert second.log_path == first.log_path
    finally:
        second.stop()
    lines = first.log_path.read_text().splitlines()
    assert "run one" in lines and "run two" in lines
