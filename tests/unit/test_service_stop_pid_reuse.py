"""A stopped service is never looked at (reported, signalled) again: process ids wrap at
``pid_max`` (32,768 here), and a long test run reuses them - a full `make test` once reported
an emulator stopped long before as "left running", because another process group had taken its
id by the end (and the clean-up then signalled that stranger's group)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pubsub_toolkit_local import processes
from pubsub_toolkit_local.processes import ServiceSpec, free_port, start_service


def test_a_stopped_service_is_ended_and_never_signalled_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    server = (
        "import http.server as h; "
        f"h.HTTPServer(('127.0.0.1', {port}), h.BaseHTTPRequestHandler).serve_forever()"
    )
    spec = ServiceSpec(
        name="probe",
        argv=(sys.executable, "-c", server),
        port=port,
        ready=lambda: not processes.port_is_free(port),
        startup_timeout=30,
    )
    service = start_service(spec, tmp_path)
    assert not service.ended
    service.stop()
    assert service.ended
    signalled: list[int] = []
    monkeypatch.setattr(
        processes, "stop_process_group", lambda pgid, grace=10.0: signalled.append(pgid)
    )
    service.stop()  # e.g. the session's clean-up: its id may be another group's by now
    assert signalled == []
