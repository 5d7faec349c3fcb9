"""Specs for the official Pub/Sub and Firestore emulators and a real redis-server.

Each spec binds to 127.0.0.1 on the given port, keeps the JVM small, and comes with a readiness
probe (both emulators answer ``GET /`` with ``Ok``; Redis answers ``PING``).

Logging: warnings and errors reach each emulator's log file, gRPC's included - the Pub/Sub
emulator's ``NoSuchMethodError ... InternalStatus.asRuntimeException`` on a cancelled stream is
how its dead-stream defect shows (see :mod:`pubsub_toolkit_cli.unary_pull`); only Netty's
own chatter is off.

What can outlive a restart (``local up --persist DIR``):

* **Firestore**: yes, through the emulator's export/import. The jar's ``--export-on-exit`` does
  nothing when it is stopped by a signal or ``/shutdown``, so :func:`export_firestore` asks for
  an export (``POST /emulator/v1/projects/P:export``) before the stack stops it, and the next
  start passes ``--import-data`` with the newest export. One project (the stack's) per export.
* **Redis**: yes, an append-only file in ``DIR/redis``.
* **Pub/Sub**: no. The 0.8.20 emulator has no data directory (gcloud's ``--data-dir`` only holds
  its env.yaml): topics are recreated, undelivered messages are lost, and message ids restart at
  "1" - so a message *without* ``dedup_key`` (keyed by its id) can be taken for an earlier one
  that a persisted dedup store remembers.
* **Cloud Tasks emulator**: no (in memory): scheduled deliveries are lost.
"""

from __future__ import annotations

import json
import shutil
import socket
import urllib.request
from collections.abc import Callable
from pathlib import Path

from pubsub_toolkit_local.processes import LOOPBACK, ServiceSpec, ServiceStartError
from pubsub_toolkit_local.sdk import firestore_jar, pubsub_launcher

_JVM_FLAGS = "-Xms64m -Xmx384m -XX:+UseSerialGC -XX:TieredStopAtLevel=1"
# java.util.logging reads no default handler from a config file: name it, or nothing is logged.
_LOGGING = (
    "handlers=java.util.logging.ConsoleHandler\n"
    "java.util.logging.ConsoleHandler.level=ALL\n"
    "java.util.logging.SimpleFormatter.format=%1$tFT%1$tT %4$s %3$s: %5$s%6$s%n\n"
    ".level=WARNING\n"
    "io.netty.level=OFF\n"
)
FIRESTORE_EXPORTS = "firestore"  # under the persist directory


def http_ok(port: int, path: str = "/") -> Callable[[], bool]:
    """A probe that passes when ``GET http://127.0.0.1:port/path`` answers 200 ``Ok``."""

    def probe() -> bool:
        with urllib.request.urlopen(f"http://{LOOPBACK}:{port}{path}", timeout=2) as response:
            return bool(response.status == 200 and response.read().strip() == b"Ok")

    return probe


def redis_ping(port: int) -> Callable[[], bool]:
    def probe() -> bool:
        with socket.create_connection((LOOPBACK, port), timeout=2) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")

    return probe


def _logging_config(work_dir: Path) -> Path:
    path = work_dir / "emulator-logging.properties"
    work_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(_LOGGING)
    return path


def pubsub_emulator(port: int, work_dir: Path) -> ServiceSpec:
    """The official Pub/Sub emulator (the launcher script execs one JVM)."""
    launcher = pubsub_launcher()  # where gcloud's SDK has it (see .sdk)
    _require_java()
    opts = f"{_JVM_FLAGS} -Djava.util.logging.config.file={_logging_config(work_dir)}"
    return ServiceSpec(
        name="pubsub-emulator",
        argv=(str(launcher), f"--host={LOOPBACK}", f"--port={port}"),
        port=port,
        ready=http_ok(port),
        env={"CLOUD_PUBSUB_EMULATOR_OPTS": opts},
    )


def firestore_emulator(
    port: int, work_dir: Path, *, import_from: Path | None = None
) -> ServiceSpec:
    """The official Firestore emulator, run straight from its jar (one JVM, one pid); with
    ``import_from`` (an ``.overall_export_metadata`` file) it starts with that export's data."""
    jar = firestore_jar()
    java = _require_java()
    return ServiceSpec(
        name="firestore-emulator",
        argv=(
            java,
            *_JVM_FLAGS.split(),
            f"-Djava.util.logging.config.file={_logging_config(work_dir)}",
            "-cp",
            str(jar),
            "com.google.cloud.datastore.emulator.firestore.CloudFirestore",
            "start",
            f"--host={LOOPBACK}",
            f"--port={port}",
            *([f"--import-data={import_from}"] if import_from is not None else []),
        ),
        port=port,
        ready=http_ok(port),
    )


def latest_firestore_export(persist_dir: Path) -> Path | None:
    """The metadata file of the newest Firestore export under ``persist_dir``, if any."""
    exports = sorted((persist_dir / FIRESTORE_EXPORTS).glob("*/*.overall_export_metadata"))
    return exports[-1] if exports else None


def export_firestore(port: int, project: str, persist_dir: Path) -> Path:
    """Export ``project``'s Firestore data under ``persist_dir``; older exports are removed
    once the new one is written. Returns the new export's metadata file."""
    target = persist_dir / FIRESTORE_EXPORTS
    target.mkdir(parents=True, exist_ok=True)
    before = {p.parent for p in target.glob("*/*.overall_export_metadata")}
    request = urllib.request.Request(
        f"http://{LOOPBACK}:{port}/emulator/v1/projects/{project}:export",
        data=json.dumps(
            {"database": f"projects/{project}/databases/(default)", "export_directory": str(target)}
        ).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()
    except OSError as exc:
        raise ServiceStartError(f"the Firestore emulator did not export its data: {exc}") from exc
    newest = latest_firestore_export(persist_dir)
    if newest is None or newest.parent in before:
        raise ServiceStartError(f"the Firestore emulator wrote no export into {target}")
    for old in before:
        shutil.rmtree(old, ignore_errors=True)
    return newest


def redis_server(port: int, *, data_dir: Path | None = None) -> ServiceSpec:
    """A redis-server on loopback: throwaway, or with ``data_dir`` an append-only file there."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise ServiceStartError("redis-server not found; install it: apt-get install redis-server")
    persistence: tuple[str, ...] = ("--save", "", "--appendonly", "no")
    if data_dir is not None:
        data_dir.mkdir(parents=True, exist_ok=True)
        persistence = ("--save", "", "--appendonly", "yes", "--dir", str(data_dir))
    return ServiceSpec(
        name="redis",
        argv=(binary, "--port", str(port), "--bind", LOOPBACK, *persistence),
        port=port,
        ready=redis_ping(port),
        startup_timeout=20,
    )


def _require_java() -> str:
    java = shutil.which("java")
    if java is None:
        raise ServiceStartError("java not found; the emulators need Java 17 (openjdk-17-jre)")
    return java


def __getattr__(name: str) -> Path:
    """``PUBSUB_EMULATOR``: the launcher found now (an older constant, kept for its importers)."""
    if name == "PUBSUB_EMULATOR":
        return pubsub_launcher()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
