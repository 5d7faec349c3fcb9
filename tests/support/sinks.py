"""A MessageSink for unit tests: records what would have been published (our own protocol)."""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field

from pubsub_toolkit.errors import TransientError
from pubsub_toolkit.message import OutboundMessage


@dataclass
class RecordingSink:
    """Keeps published messages per topic; can be told to fail the next N publishes."""

    published: dict[str, list[OutboundMessage]] = field(default_factory=dict)
    fail_next: int = 0
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def publish(self, topic: str, message: OutboundMessage) -> str:
        with self._lock:
            if self.fail_next > 0:
                self.fail_next -= 1
                raise TransientError(f"injected publish failure on {topic}")
            self.published.setdefault(topic, []).append(message)
            return str(next(self._ids))

    def on(self, topic: str) -> list[OutboundMessage]:
        return self.published.get(topic, [])
