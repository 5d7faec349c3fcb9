"""A plain (non-FIFO) message's delayed retry: what the consumer's processor re-schedules when a
handler raises :class:`~pubsub_toolkit.errors.RetryLater` (see
:class:`~pubsub_toolkit.consumer.processor.MessageProcessor`; a FIFO group's retry is the gate's).

The copy carries ``retry_attempt`` (its attempt number: 2 for the first retry) and
``retry_consumer`` (whose count it is); both are toolkit-stamped, outside the content fingerprint,
and make the copy's fate key ``dedup_key#retry:CONSUMER:ATTEMPT``
(:func:`~pubsub_toolkit.delay.cancel.fate_key`), so its task and its release record are its own.
"""

from __future__ import annotations

import threading
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.config import DelaySettings
from pubsub_toolkit.core.process import REASON_RETRY_LIMIT, RETRY_SCHEDULED, retry_attempt
from pubsub_toolkit.message import Message, OutboundMessage

if TYPE_CHECKING:
    from pubsub_toolkit.delay.scheduler import CloudTasksScheduler

# The outcome, the reason and the attempt count are the core's (core/process.py decides them);
# importable from here too, as before.
__all__ = [
    "REASON_RETRY_LIMIT",
    "RETRY_SCHEDULED",
    "RetryScheduler",
    "SchedulerFromSettings",
    "retry_attempt",
    "retry_copy",
]


class RetryScheduler(Protocol):
    """What a delayed retry needs of the delay path (the Cloud Tasks scheduler): deliver
    ``message`` to the final topic at ``deliver_at``, once per fate key of ``dedup_key``."""

    def schedule(
        self, message: OutboundMessage, deliver_at: datetime, dedup_key: str, hop: int = 0
    ) -> str: ...


class SchedulerFromSettings:
    """The Cloud Tasks scheduler, made at the first RetryLater: a consumer without the
    ``[tasks]`` extra starts as before and only a retry names the missing extra."""

    def __init__(self, delay: DelaySettings) -> None:
        self._delay = delay
        self._scheduler: CloudTasksScheduler | None = None
        self._lock = threading.Lock()

    def schedule(
        self, message: OutboundMessage, deliver_at: datetime, dedup_key: str, hop: int = 0
    ) -> str:
        with self._lock:
            if self._scheduler is None:
                from pubsub_toolkit.delay.scheduler import CloudTasksScheduler

                self._scheduler = CloudTasksScheduler.from_settings(self._delay)
        return self._scheduler.schedule(message, deliver_at, dedup_key, hop)


def retry_copy(message: Message, dedup_key: str, consumer: str, attempt: int) -> OutboundMessage:
    """The copy of ``message`` to deliver again as ``consumer``'s attempt ``attempt``: the
    same data, attributes and dedup key, with its attempt count."""
    attributes = {
        **message.attributes,
        attr.DEDUP_KEY: dedup_key,
        attr.RETRY_ATTEMPT: str(attempt),
        attr.RETRY_CONSUMER: consumer,
    }
    return OutboundMessage(message.data, attributes, message.ordering_key)
