"""What ingress decides for one delivery, and the scheduler it hands delayed messages to."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from pubsub_toolkit.message import OutboundMessage


class IngressOutcome(enum.StrEnum):
    """What ingress did with one delivery (every one of them means: ack)."""

    PUBLISHED = "published"
    SCHEDULED = "scheduled"
    DUPLICATE = "duplicate"
    DEAD_LETTERED = "dead_lettered"
    CANCELLED = "cancelled"  # due on arrival, but cancelled before it could be released


@dataclass(frozen=True)
class Routed:
    """What the first copy of a key did - stored as the dedup result, so duplicates know it
    (``seq`` lets a producer's renumbered retry be told from a plain redelivery)."""

    outcome: IngressOutcome
    detail: str = ""
    seq: int | None = None

    def to_result(self) -> str:
        return json.dumps({"o": self.outcome.value, "d": self.detail, "seq": self.seq})

    @classmethod
    def from_result(cls, result: str | None) -> Routed:
        if result and result.startswith("{"):
            doc = json.loads(result)
            return cls(IngressOutcome(doc["o"]), doc["d"], doc.get("seq"))
        kind, _, detail = (result or "published:").partition(":")  # written by older versions
        return cls(IngressOutcome(kind), detail)


@dataclass(frozen=True)
class IngressResult:
    outcome: IngressOutcome
    dedup_key: str | None
    detail: str = ""


class Scheduler(Protocol):
    """Parks a message until its due time (Cloud Tasks; see the delay package)."""

    def schedule(self, message: OutboundMessage, deliver_at: datetime, dedup_key: str) -> str:
        """Arrange for ``message`` to reach the final topic at ``deliver_at``; return a task id."""
        ...
