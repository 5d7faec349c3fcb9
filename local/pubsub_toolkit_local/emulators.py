"""Specs for the official Pub/Sub and Firestore emulators and a real redis-server.

Each spec binds to 127.0.0.1 on the given port, keeps the JVM small and quiet, and comes with a
readiness probe (both emulators answer ``GET /`` with ``Ok``; Redis answers ``PING``).
"""

from __future__ import annotations

import shutil
import socket
import urllib.request
from collections.abc import Callable
from pathlib import Path

from pubsub_toolkit_local.processes import LOOPBACK, ServiceSpec, ServiceStartError

GCLOUD_SDK = Path("/usr/lib/google-cloud-sdk")
PUBSUB_EMULATOR = GCLOUD_SDK / "platform/pubsub-emulator/bin/cloud-pubsub-emulator"
FIRESTORE_JAR = GCLOUD_SDK / "platform/cloud-firestore-emulator/cloud-firestore-emulator.jar"
_JVM_FLAGS = "-Xms64m -Xmx384m -XX:+UseSerialGC -XX:TieredStopAtLevel=1"
_QUIET_LOGGING = ".level=SEVERE\nio.netty.level=OFF\nio.grpc.level=OFF\n"


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
    path.write_text(_QUIET_LOGGING)
    return path


def pubsub_emulator(port: int, work_dir: Path) -> ServiceSpec:
    """The official Pub/Sub emulator (the launcher script execs one JVM)."""
    if not PUBSUB_EMULATOR.exists():
        raise ServiceStartError(
            f"Pub/Sub emulator not found at {PUBSUB_EMULATOR}; "
            "install the Debian package google-cloud-cli-pubsub-emulator"
        )
    _require_java()
    opts = f"{_JVM_FLAGS} -Djava.util.logging.config.file={_logging_config(work_dir)}"
    return ServiceSpec(
        name="pubsub-emulator",
        argv=(str(PUBSUB_EMULATOR), f"--host={LOOPBACK}", f"--port={port}"),
        port=port,
        ready=http_ok(port),
        env={"CLOUD_PUBSUB_EMULATOR_OPTS": opts},
    )


def firestore_emulator(port: int, work_dir: Path) -> ServiceSpec:
    """The official Firestore emulator, run straight from its jar (one JVM, one pid)."""
    if not FIRESTORE_JAR.exists():
        raise ServiceStartError(
            f"Firestore emulator not found at {FIRESTORE_JAR}; "
            "install the Debian package google-cloud-cli-firestore-emulator"
        )
    java = _require_java()
    return ServiceSpec(
        name="firestore-emulator",
        argv=(
            java,
            *_JVM_FLAGS.split(),
            f"-Djava.util.logging.config.file={_logging_config(work_dir)}",
            "-cp",
            str(FIRESTORE_JAR),
            "com.google.cloud.datastore.emulator.firestore.CloudFirestore",
            "start",
            f"--host={LOOPBACK}",
            f"--port={port}",
        ),
        port=port,
        ready=http_ok(port),
    )


def redis_server(port: int) -> ServiceSpec:
    """A throwaway redis-server: loopback only, no persistence."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise ServiceStartError("redis-server not found; install it: apt-get install redis-server")
    return ServiceSpec(
        name="redis",
        argv=(binary, "--port", str(port), "--bind", LOOPBACK, "--save", "", "--appendonly", "no"),
        port=port,
        ready=redis_ping(port),
        startup_timeout=20,
    )


def _require_java() -> str:
    java = shutil.which("java")
    if java is None:
        raise ServiceStartError("java not found; the emulators need Java 17 (openjdk-17-jre)")
    return java
