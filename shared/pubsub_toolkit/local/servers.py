"""Specs for the toolkit's own servers in the local stack: functions served by
functions-framework (standing in for Cloud Functions) and, later, the relay under gunicorn."""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from pubsub_toolkit.local.processes import LOOPBACK, ServiceSpec


def tcp_open(port: int) -> Callable[[], bool]:
    """A probe that passes once something accepts connections on ``port``."""

    def probe() -> bool:
        with socket.create_connection((LOOPBACK, port), timeout=1):
            return True

    return probe


def cloud_function(
    name: str, *, source: Path, target: str, port: int, env: Mapping[str, str]
) -> ServiceSpec:
    """A CloudEvent function served by functions-framework, as Cloud Functions would run it."""
    functions_framework = Path(sys.executable).with_name("functions-framework")
    return ServiceSpec(
        name=name,
        argv=(
            str(functions_framework),
            f"--source={source}",
            f"--target={target}",
            "--signature-type=cloudevent",
            f"--host={LOOPBACK}",
            f"--port={port}",
        ),
        port=port,
        ready=tcp_open(port),
        env=dict(env),
        cwd=str(source.parent),
        startup_timeout=30,
    )
