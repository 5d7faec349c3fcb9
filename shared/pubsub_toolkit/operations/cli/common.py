"""Shared pieces of the command line: argument types, names, and the local-stack check."""

from __future__ import annotations

import argparse
import os
import re
import socket
from datetime import datetime, timedelta

from pubsub_toolkit.attributes import parse_time
from pubsub_toolkit.errors import ConfigurationError, ToolkitError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


def duration(text: str) -> timedelta:
    """Parse ``30s``, ``5m``, ``1.5h``, ``250ms`` or plain seconds."""
    match = _DURATION.match(text)
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 30s, 5m, 1h")
    return timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])


def timestamp(text: str) -> datetime:
    try:
        return parse_time(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an RFC 3339 time with an offset, e.g. 2030-01-01T09:00:00Z"
        ) from exc


def attribute(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not key=value")
    return key, value


def require_emulator_if_local() -> None:
    """Fail fast, with the fix, when the environment points at a local stack that is down."""
    host = os.environ.get("PUBSUB_EMULATOR_HOST")
    if not host:
        return
    address, _, port = host.rpartition(":")
    try:
        with socket.create_connection((address or "127.0.0.1", int(port)), timeout=2):
            return
    except (OSError, ValueError):
        raise ToolkitError(
            f"nothing answers at PUBSUB_EMULATOR_HOST={host}: is the local stack running? "
            "Start it with `pubsub-toolkit local up`"
        ) from None


def full_topic(name: str) -> str:
    from pubsub_toolkit.config import topic_path

    project = os.environ.get("GOOGLE_CLOUD_PROJECT", "").strip()
    if not project and not name.startswith("projects/"):
        raise ConfigurationError("environment variable GOOGLE_CLOUD_PROJECT is required")
    return topic_path(project, name)


def full_subscription(name: str) -> str:
    if name.startswith("projects/"):
        return name
    project = os.environ.get("GOOGLE_CLOUD_PROJECT", "").strip()
    if not project:
        raise ConfigurationError("environment variable GOOGLE_CLOUD_PROJECT is required")
    return f"projects/{project}/subscriptions/{name}"
