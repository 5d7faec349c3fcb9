"""Shared pieces of the command line: argument types, names, and the local-stack check."""

from __future__ import annotations

import argparse
import os
import re
import socket
from datetime import UTC, datetime, timedelta

from pubsub_toolkit.attributes import MAX_FIFO_GROUP_BYTES, parse_deliver_at
from pubsub_toolkit.delay.scheduler import MAX_DELAY  # the limit ingress enforces
from pubsub_toolkit.errors import ConfigurationError, ContractViolation, ToolkitError

_DURATION = re.compile(r"^\s*(-?)\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}
NO_CREDENTIALS = (
    'no Google credentials - point it at the emulators (eval "$(pubsub-toolkit local env)"), '
    "or run `gcloud auth application-default login` or set GOOGLE_APPLICATION_CREDENTIALS"
)
# MAX_DELAY: how far ahead a delayed message may be due; ingress dead-letters a later one
# (delay_too_long). Cloud Tasks itself schedules at most 30 days ahead; the relay re-schedules
# (hops) a message due later, up to this limit.


def duration(text: str) -> timedelta:
    """Parse ``30s``, ``5m``, ``1.5h``, ``250ms``, ``3d`` or plain seconds (never negative)."""
    match = _DURATION.match(text)
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 30s, 5m, 1h, 2d")
    if match.group(1):
        raise argparse.ArgumentTypeError(f"{text!r} is negative: give 0 or more, e.g. 30s")
    return timedelta(seconds=float(match.group(2)) * _UNITS[match.group(3)])


def delay(text: str) -> timedelta:
    """A ``--delay``: a duration of 0 up to :data:`MAX_DELAY`."""
    match = _DURATION.match(text)
    if match is not None and match.group(1):
        raise argparse.ArgumentTypeError(
            f"{text!r} is a negative delay: a message cannot be due in the past; use 0s to "
            "deliver at once, or a positive delay such as 30s"
        )
    value = duration(text)
    if value > MAX_DELAY:
        raise argparse.ArgumentTypeError(
            f"{text!r} is more than {MAX_DELAY.days} days: delayed delivery reaches at most "
            f"{MAX_DELAY.days} days ahead (ingress would dead-letter it as delay_too_long)"
        )
    return value


def timestamp(text: str) -> datetime:
    """An RFC 3339 time with an offset, by ingress's own rule (``deliver_at``'s): what it would
    dead-letter is refused here, with its words (February 30th: "not a valid time")."""
    try:
        return parse_deliver_at(text)
    except ContractViolation as exc:
        raise argparse.ArgumentTypeError(exc.detail.replace("deliver_at ", "", 1)) from exc


def due_time(text: str) -> datetime:
    """A ``--deliver-at``: an RFC 3339 time at most :data:`MAX_DELAY` from now (checked
    before anything is published, so it is refused here rather than dead-lettered later)."""
    when = timestamp(text)
    ahead = when - datetime.now(UTC)
    if ahead > MAX_DELAY:
        raise argparse.ArgumentTypeError(
            f"{text} is {ahead.days} days ahead: delayed delivery reaches at most "
            f"{MAX_DELAY.days} days ahead (Cloud Tasks schedules 30 days ahead and the relay "
            f"re-schedules up to {MAX_DELAY.days}); ingress would dead-letter it as "
            "delay_too_long"
        )
    return when


def fifo_group(text: str) -> str:
    """A ``--fifo-group``: a non-blank name within the ordering-key limit."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            f"{text!r} is empty: a FIFO group needs a name, e.g. --fifo-group order-42 "
            "(leave the option out to publish outside any group)"
        )
    if len(text.encode()) > MAX_FIFO_GROUP_BYTES:
        raise argparse.ArgumentTypeError(
            f"the group name is {len(text.encode())} bytes; at most {MAX_FIFO_GROUP_BYTES} "
            "(it is the Pub/Sub ordering key)"
        )
    return text


def group_name(text: str) -> str:
    """A FIFO group an operator names (`status --group`, `fifo skip|replay GROUP`): non-blank,
    within the ordering-key limit - a blank one would be read, or written, as a group."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is empty: name a FIFO group, e.g. order-42")
    if len(text.encode()) > MAX_FIFO_GROUP_BYTES:
        raise argparse.ArgumentTypeError(
            f"the group name is {len(text.encode())} bytes; at most {MAX_FIFO_GROUP_BYTES}"
        )
    return text


def port_number(text: str) -> int:
    """A TCP port to listen on, or 0 for any free one (the socket layer would otherwise take
    99999 modulo 65536 and serve somewhere else without a word)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port (0-65535; 0: any free port)")
    return port


def non_negative_int(text: str) -> int:
    """A whole number of 0 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is negative: give 0 or more")
    return value


def positive_int(text: str) -> int:
    """A whole number of 1 or more."""
    value = non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("0 is not allowed here: give 1 or more")
    return value


def attribute(text: str) -> tuple[str, str]:
    """A ``--attr K=V``."""
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
    """``projects/P/topics/NAME`` for a short ``name`` (P from GOOGLE_CLOUD_PROJECT)."""
    from pubsub_toolkit.config import topic_path

    project = os.environ.get("GOOGLE_CLOUD_PROJECT", "").strip()
    if not project and not name.startswith("projects/"):
        raise ConfigurationError("environment variable GOOGLE_CLOUD_PROJECT is required")
    return topic_path(project, name)


def full_subscription(name: str) -> str:
    """``projects/P/subscriptions/NAME`` for a short ``name``."""
    if name.startswith("projects/"):
        return name
    project = os.environ.get("GOOGLE_CLOUD_PROJECT", "").strip()
    if not project:
        raise ConfigurationError("environment variable GOOGLE_CLOUD_PROJECT is required")
    return f"projects/{project}/subscriptions/{name}"
