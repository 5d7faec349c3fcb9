"""Cloud Tasks resource names: parsing, validation, and generated task ids.

The character sets and lengths are the ones the API documents for ``Task.name``; a name that
breaks them is refused with INVALID_ARGUMENT, as Cloud Tasks does.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

from .errors import invalid_argument

_LOCATION = (
    r"projects/(?P<project>[A-Za-z0-9:.\-]{1,100})"
    r"/locations/(?P<location>[A-Za-z0-9\-]{1,63})"
)
_QUEUE = _LOCATION + r"/queues/(?P<queue>[A-Za-z0-9\-]{1,100})"
_TASK = _QUEUE + r"/tasks/(?P<task>[A-Za-z0-9_\-]{1,500})"
_LOCATION_RE = re.compile(_LOCATION)
_QUEUE_RE = re.compile(_QUEUE)
_TASK_RE = re.compile(_TASK)


@dataclass(frozen=True, order=True)
class QueueName:
    """``projects/P/locations/L/queues/Q``."""

    project: str
    location: str
    queue_id: str

    @property
    def parent(self) -> str:
        """The location the queue lives in: ``projects/P/locations/L``."""
        return f"projects/{self.project}/locations/{self.location}"

    def task(self, task_id: str) -> TaskName:
        """The name of task ``task_id`` in this queue."""
        return TaskName(self, task_id)

    def __str__(self) -> str:
        return f"{self.parent}/queues/{self.queue_id}"


@dataclass(frozen=True, order=True)
class TaskName:
    """``projects/P/locations/L/queues/Q/tasks/T``."""

    queue: QueueName
    task_id: str

    def __str__(self) -> str:
        return f"{self.queue}/tasks/{self.task_id}"


def parse_location(text: str) -> str:
    """Validate ``projects/P/locations/L`` and return it."""
    if not _LOCATION_RE.fullmatch(text):
        raise invalid_argument(f"invalid location name {text!r}: want projects/P/locations/L")
    return text


def parse_queue_name(text: str) -> QueueName:
    """Parse ``projects/P/locations/L/queues/Q``."""
    match = _QUEUE_RE.fullmatch(text)
    if match is None:
        raise invalid_argument(
            f"invalid queue name {text!r}: want projects/P/locations/L/queues/Q "
            "(Q: letters, digits, hyphens; at most 100)"
        )
    return QueueName(match["project"], match["location"], match["queue"])


def parse_task_name(text: str) -> TaskName:
    """Parse ``projects/P/locations/L/queues/Q/tasks/T``."""
    match = _TASK_RE.fullmatch(text)
    if match is None:
        raise invalid_argument(
            f"invalid task name {text!r}: want projects/P/locations/L/queues/Q/tasks/T "
            "(T: letters, digits, hyphens, underscores; at most 500)"
        )
    return TaskName(QueueName(match["project"], match["location"], match["queue"]), match["task"])


def new_task_id() -> str:
    """A generated id shaped like Cloud Tasks' own (a string of 20 digits)."""
    return str(secrets.randbelow(10**20)).zfill(20)
