"""A local server the test may stop and start again on the same port (for fault tests).

Each start is its own process group (``start_service``), stopped by process group; ``close``
stops whatever is running, so nothing outlives the test (the session's orphan check).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pubsub_toolkit_local.processes import RunningService, ServiceSpec, start_service


class Restartable:
    """``make_spec(port, work_dir)`` started on demand; ``stop``/``start`` keep the port."""

    def __init__(self, make_spec: Callable[[int, Path], ServiceSpec], port: int, work: Path):
        self._make_spec = make_spec
        self.port = port
        self._work = work
        self._service: RunningService | None = None
        self.starts = 0

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> Restartable:
        assert self._service is None, "already running"
        self.starts += 1
        work = self._work / f"run-{self.starts}"
        self._service = start_service(self._make_spec(self.port, work), work)
        return self

    def stop(self) -> None:
        """Stop the process group (SIGTERM, then SIGKILL): the server loses its state."""
        if self._service is not None:
            self._service.stop()
            assert not self._service.alive()
            self._service = None

    def restart(self) -> None:
        self.stop()
        self.start()

    close = stop
