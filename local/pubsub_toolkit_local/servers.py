"""Specs for the toolkit's own servers in the local stack: functions served by
functions-framework (standing in for Cloud Functions), the relay under gunicorn (standing in for
App Engine), and the Cloud Tasks emulator."""

from __future__ import annotations

import socket
import sys
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path

from pubsub_toolkit_local.processes import LOOPBACK, ServiceSpec


def tcp_open(port: int) -> Callable[[], bool]:
    """A probe that passes once something accepts connections on ``port``."""

    def probe() -> bool:
        with socket.create_connection((LOOPBACK, port), timeout=1):
            return True

    return probe


def cloud_function(
    name: str, *, source: Path, target: str, port: int, env: Mapping[str, str]
) -> ServiceSpec:
    """An HTTP function served by functions-framework, as Cloud Functions runs it behind a push
    subscription."""
    functions_framework = Path(sys.executable).with_name("functions-framework")
    return ServiceSpec(
        name=name,
        argv=(
            str(functions_framework),
            f"--source={source}",
            f"--target={target}",
            "--signature-type=http",
            f"--host={LOOPBACK}",
            f"--port={port}",
        ),
        port=port,
        ready=tcp_open(port),
        env=dict(env),
        cwd=str(source.parent),
        startup_timeout=30,
    )


def tasks_emulator(port: int, *, oidc_port: int, app_engine_host: str | None = None) -> ServiceSpec:
    """The toolkit's Cloud Tasks emulator, with its OIDC certificates served on ``oidc_port``."""
    argv = [
        sys.executable,
        "-m",
        "pubsub_toolkit_local.tasks_emulator",
        f"--host={LOOPBACK}",
        f"--port={port}",
        f"--oidc-port={oidc_port}",
        "--log-level=WARNING",
    ]
    if app_engine_host:
        argv.append(f"--app-engine-host={app_engine_host}")
    return ServiceSpec(
        name="cloud-tasks-emulator",
        argv=tuple(argv),
        port=port,
        ready=lambda: tcp_open(port)() and tcp_open(oidc_port)(),
        startup_timeout=30,
    )


def relay(port: int, *, app_dir: Path, env: Mapping[str, str], threads: int = 8) -> ServiceSpec:
    """The App Engine relay under gunicorn, as App Engine's entrypoint runs it."""
    gunicorn = Path(sys.executable).with_name("gunicorn")
    return ServiceSpec(
        name="relay",
        argv=(
            str(gunicorn),
            f"--bind={LOOPBACK}:{port}",
            "--workers=1",
            f"--threads={threads}",
            "--timeout=120",
            "--graceful-timeout=5",
            "main:create_app()",
        ),
        port=port,
        ready=http_ok_json(port, "/healthz"),
        env=dict(env),
        cwd=str(app_dir),
        startup_timeout=30,
    )


def http_ok_json(port: int, path: str) -> Callable[[], bool]:
    """A probe that passes when ``GET path`` answers 200."""

    def probe() -> bool:
        with urllib.request.urlopen(f"http://{LOOPBACK}:{port}{path}", timeout=2) as response:
            return bool(response.status == 200)

    return probe
