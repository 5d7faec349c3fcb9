"""One consistent picture of the pipeline for operators: what ``status`` prints and the page shows.

:func:`gather` reads every part through a :class:`StatusSource` and returns a frozen
:class:`StatusSnapshot`; rendering (text or HTML) never talks to a backend.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from pubsub_toolkit.attributes import format_time
from pubsub_toolkit.operations.dashboard.history import History
from pubsub_toolkit.operations.group_status import GroupStatus, state_text


@dataclass(frozen=True)
class DeadLetterCounts:
    """Messages waiting on the dead-letter subscription, by ``error_reason``."""

    subscription: str
    exists: bool  # False: there is no such subscription (nothing to count)
    by_reason: tuple[tuple[str, int], ...] = ()  # sorted by reason
    truncated: bool = False  # the count stopped at its limit: there may be more

    @property
    def total_text(self) -> str:
        """The total as shown: ``1000+`` when the count stopped at its limit."""
        return f"{self.total}+" if self.truncated else str(self.total)

    @property
    def total(self) -> int:
        return sum(n for _, n in self.by_reason)


@dataclass(frozen=True)
class ScheduledCount:
    """Delayed messages still waiting as Cloud Tasks tasks."""

    queue: str | None  # None: TASKS_QUEUE is not set (delays are off)
    waiting: int = 0


@dataclass(frozen=True)
class DedupRate:
    """Ingress deliveries and how many of them were duplicates, over every ingress instance."""

    deliveries: int
    duplicates: int

    @property
    def hit_rate(self) -> float | None:
        """duplicates / deliveries, or None before the first delivery."""
        return self.duplicates / self.deliveries if self.deliveries else None


@dataclass(frozen=True)
class StatusSnapshot:
    """Everything the status command and page show, as of ``taken_at``."""

    taken_at: datetime
    consumer: str
    groups: tuple[GroupStatus, ...]
    dead_letters: DeadLetterCounts
    scheduled: ScheduledCount
    dedup: DedupRate
    history: History = field(default_factory=History)  # the last hour (the page's charts)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the page's ``/status.json``)."""
        return {
            "taken_at": format_time(self.taken_at),
            "consumer": self.consumer,
            "fifo_groups": [
                {
                    "group": g.group,
                    "last_issued": g.last_issued,
                    "last_processed": g.last_processed,
                    "parked": g.parked,
                    "gap_age_s": g.oldest_gap_age_s,
                    "blocked_at": g.blocked_at,
                    "skipped": list(g.skipped),
                    "state": state_text(g),
                }
                for g in self.groups
            ],
            "dead_letters": {
                "subscription": self.dead_letters.subscription,
                "exists": self.dead_letters.exists,
                "total": self.dead_letters.total,
                "truncated": self.dead_letters.truncated,
                "by_reason": dict(self.dead_letters.by_reason),
            },
            "scheduled": {"queue": self.scheduled.queue, "waiting": self.scheduled.waiting},
            "dedup": {
                "deliveries": self.dedup.deliveries,
                "duplicates": self.dedup.duplicates,
                "hit_rate": self.dedup.hit_rate,
            },
            "history": self.history.to_json(),
        }


class StatusSource(Protocol):
    """Where a snapshot's parts are read from (live clients, or fixed values in tests)."""

    consumer: str

    def fifo_groups(self, now: datetime) -> list[GroupStatus]: ...

    def dead_letters(self) -> DeadLetterCounts: ...

    def scheduled(self) -> ScheduledCount: ...

    def dedup(self) -> DedupRate: ...

    def history(self, now: datetime) -> History: ...


def gather(source: StatusSource, *, now: datetime) -> StatusSnapshot:
    """Read every part once and freeze the result."""
    return StatusSnapshot(
        taken_at=now,
        consumer=source.consumer,
        groups=tuple(source.fifo_groups(now)),
        dead_letters=source.dead_letters(),
        scheduled=source.scheduled(),
        dedup=source.dedup(),
        history=source.history(now),  # after fifo_groups: it charts that sample too
    )
