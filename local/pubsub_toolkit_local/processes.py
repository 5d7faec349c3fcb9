"""Start and stop local server processes, each in its own process group.

Every service is started with ``start_new_session=True`` so it leads a new process group; it is
stopped by signalling that group (SIGTERM, then SIGKILL after a grace period). That reaches the
JVM behind a wrapper script too, and never touches a process we did not start. Readiness is a
probe polled against a deadline; a process that exits early reports the tail of its log.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pubsub_toolkit.errors import ToolkitError

LOOPBACK = "127.0.0.1"


class ServiceStartError(ToolkitError):
    """A local service could not start; the message says what to fix."""


# Every service this process started, so a test run can prove none outlives it.
STARTED: list[RunningService] = []


@dataclass(frozen=True)
class ServiceSpec:
    """How to run one local service and how to tell that it is ready."""

    name: str
    argv: tuple[str, ...]
    port: int
    ready: Callable[[], bool]
    env: Mapping[str, str] = field(default_factory=dict)
    startup_timeout: float = 60.0
    cwd: str | None = None


class RunningService:
    """A started service: its process (group) id, port and log file."""

    def __init__(self, spec: ServiceSpec, process: subprocess.Popen[bytes], log_path: Path) -> None:
        self.spec = spec
        self.process = process
        self.log_path = log_path
        # Set once stop() saw the whole group gone. Process ids are reused (pid_max is often
        # 32,768): after that, a live group with this id is someone else's, never ours to
        # report or signal again.
        self.ended = False

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def port(self) -> int:
        return self.spec.port

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, grace: float = 10.0) -> None:
        """Stop the whole process group and reap the leader; safe to call twice (once the
        group is gone, a second call signals nothing: its id may belong to another by then)."""
        if self.ended:
            return
        stop_process_group(self.pid, grace=grace)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=grace)
        self.ended = not process_group_alive(self.pid)


def free_port() -> int:
    """A TCP port on loopback that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int) -> bool:
    """True when nothing listens on ``port`` (connections left in TIME_WAIT do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Without SO_REUSEADDR the bind fails for up to a minute after a server on this port
        # stopped (its closed connections linger in TIME_WAIT), so restarting a service on the
        # same port was refused as "in use". The servers themselves bind with SO_REUSEADDR;
        # on Linux it still refuses a port that a live socket is listening on.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
        return True


def start_service(spec: ServiceSpec, log_dir: Path) -> RunningService:
    """Start ``spec`` in a new process group and wait until its readiness probe passes."""
    if not port_is_free(spec.port):
        raise ServiceStartError(
            f"{spec.name}: port {spec.port} on {LOOPBACK} is already in use; "
            "stop whatever holds it or choose another port"
        )
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{spec.name}.log"
    try:
        # Appended to: a restart on the same directory (`local restart PART`) keeps the lines
        # of the run before it, which say what happened while it was failing.
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                spec.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **spec.env},
                cwd=spec.cwd,
                start_new_session=True,
            )
    except FileNotFoundError as exc:
        raise ServiceStartError(f"{spec.name}: cannot run {spec.argv[0]!r}: {exc}") from exc
    service = RunningService(spec, process, log_path)
    STARTED.append(service)
    deadline = time.monotonic() + spec.startup_timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServiceStartError(
                f"{spec.name} exited with code {process.returncode} before it was ready; "
                f"last log lines:\n{tail(log_path)}"
            )
        if _probe(spec.ready):
            return service
        # Waiting on the process doubles as the poll interval and notices an early exit at once.
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=0.1)
    service.stop()
    raise ServiceStartError(
        f"{spec.name} was not ready within {spec.startup_timeout:.0f}s; "
        f"last log lines:\n{tail(log_path)}"
    )


def stop_process_group(pgid: int, *, grace: float = 10.0) -> bool:
    """SIGTERM the group ``pgid``, SIGKILL it after ``grace`` seconds. True if it was running."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # not ours (a stale record whose id was reused): never touch it
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        _reap(pgid)
        if not process_group_alive(pgid):
            return True
        time.sleep(0.05)  # polling a foreign process group: there is nothing to wait on
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    _reap(pgid)
    return True


def process_group_alive(pgid: int) -> bool:
    """True while any process of group ``pgid`` exists (zombies of our own are reaped first)."""
    _reap(pgid)
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _reap(pid: int) -> None:
    # The group leader is our child when we started it in this process; reap it so a zombie
    # does not look alive.
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _probe(ready: Callable[[], bool]) -> bool:
    try:
        return ready()
    except Exception:  # any failure of a probe (refused, reset, half-written reply) = not ready
        return False


def tail(path: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of a log file (empty if it does not exist)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class ServiceGroup:
    """Services started together and stopped together (in reverse order), even on errors."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.services: list[RunningService] = []

    def start(self, spec: ServiceSpec) -> RunningService:
        service = start_service(spec, self.log_dir)
        self.services.append(service)
        return service

    def stop_all(self) -> None:
        for service in reversed(self.services):
            service.stop()
        self.services.clear()

    def __enter__(self) -> ServiceGroup:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop_all()
