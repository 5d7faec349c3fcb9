"""One consistent picture of the pipeline for operators: what ``status`` prints and the page shows.

:func:`gather` reads every part through a :class:`StatusSource` and returns a frozen
:class:`StatusSnapshot`; rendering (text or HTML) never talks to a backend.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from pubsub_toolkit.attributes import format_time
from pubsub_toolkit_cli.dashboard.cards import CardReader, Part, Unavailable
from pubsub_toolkit_cli.dashboard.history import History
from pubsub_toolkit_cli.dashboard.monitoring import ConsumerHealth, SubscriptionBacklog
from pubsub_toolkit_cli.group_status import GroupStatus, state_text


@dataclass(frozen=True)
class DeadLetterCounts:
    """Messages waiting on the dead-letter subscription: the count, and ``error_reason`` s of a
    bounded sample."""

    subscription: str
    exists: bool  # False: there is no such subscription (nothing to count)
    by_reason: tuple[tuple[str, int], ...] = ()  # of the sample, sorted by reason
    truncated: bool = False  # the sample stopped at its limit: there may be more
    counted: int | None = None  # the whole backlog, where Cloud Monitoring reports it

    @property
    def total_text(self) -> str:
        """The total as shown: ``≥ 100`` when only a sample stopped at its limit is known."""
        if self.counted is not None:
            return str(self.counted)
        return f"≥ {self.sampled}" if self.truncated else str(self.sampled)

    @property
    def sampled(self) -> int:
        return sum(n for _, n in self.by_reason)

    @property
    def total(self) -> int:
        return self.sampled if self.counted is None else max(self.counted, self.sampled)


@dataclass(frozen=True)
class ScheduledCount:
    """Delayed messages still waiting as Cloud Tasks tasks."""

    queue: str | None  # None: PUBSUB_TOOLKIT_TASKS_QUEUE is not set (delays are off)
    waiting: int = 0
    at_least: bool = False  # a bounded listing stopped: ``waiting`` or more

    @property
    def waiting_text(self) -> str:
        return f"≥ {self.waiting}" if self.at_least else str(self.waiting)


@dataclass(frozen=True)
class StoreHealth:
    """The configured store backend and whether it answered a small read."""

    backend: str
    reachable: bool = True


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
    store: StoreHealth | None = None
    backlogs: tuple[SubscriptionBacklog | Unavailable, ...] = ()  # origin, final
    consumers: ConsumerHealth | Unavailable | None = None
    problems: tuple[tuple[str, str], ...] = ()  # (part, why it shows no figure), by part

    def problem(self, part: str) -> str | None:
        """Why ``part`` has no figure this time (None: it has one)."""
        return dict(self.problems).get(part)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the page's ``/status.json``); ``problems`` names the parts
        whose values are empty because their read failed."""
        return {
            "problems": dict(self.problems),
            "store": None if self.store is None else vars(self.store),
            "backlogs": [_backlog_json(b) for b in self.backlogs],
            "consumers": _consumers_json(self.consumers),
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
                "counted": self.dead_letters.counted,
                "by_reason": dict(self.dead_letters.by_reason),
            },
            "scheduled": {
                "queue": self.scheduled.queue,
                "waiting": self.scheduled.waiting,
                "at_least": self.scheduled.at_least,
            },
            "dedup": {
                "deliveries": self.dedup.deliveries,
                "duplicates": self.dedup.duplicates,
                "hit_rate": self.dedup.hit_rate,
            },
            "history": self.history.to_json(),
        }


def _backlog_json(backlog: SubscriptionBacklog | Unavailable) -> dict[str, Any]:
    if isinstance(backlog, Unavailable):
        return {"unavailable": backlog.reason}
    return vars(backlog)


def _consumers_json(health: ConsumerHealth | Unavailable | None) -> dict[str, Any] | None:
    if health is None or isinstance(health, Unavailable):
        return None if health is None else {"unavailable": health.reason}
    last = health.last_decision_at
    return {
        "window_s": health.window.total_seconds(),
        "last_decision_at": None if last is None else format_time(last),
        "decisions": health.decisions,
        "errors": health.errors,
        "error_rate": health.error_rate,
        "handler_p50_s": health.handler_p50_s,
        "handler_p99_s": health.handler_p99_s,
    }


class StatusSource(Protocol):
    """Where a snapshot's parts are read from (live clients, or fixed values in tests). Each
    method may raise: its part shows why, the others still show."""

    consumer: str

    def fifo_groups(self, now: datetime) -> list[GroupStatus]: ...

    def dead_letters(self, now: datetime) -> DeadLetterCounts: ...

    def scheduled(self, now: datetime) -> ScheduledCount: ...

    def dedup(self) -> DedupRate: ...

    def history(self, now: datetime) -> History: ...

    def store(self, now: datetime) -> StoreHealth: ...

    def backlogs(self, now: datetime) -> tuple[Part, ...]:
        """One part per subscription shown (origin, final), read like the others."""
        ...

    def consumers(self, now: datetime) -> ConsumerHealth: ...

    def backend(self, part: str) -> str:
        """What ``part`` reads ("store", "Pub/Sub", ...): named when it fails."""
        ...


_READER = CardReader()


def gather(
    source: StatusSource, *, now: datetime, reader: CardReader | None = None
) -> StatusSnapshot:
    """Read every part once, each in parallel under one deadline, and freeze the result."""
    reader = reader or _READER
    key = f"{id(source)}:"  # the reader remembers hanging reads per source and part
    parts = {
        "groups": Part(source.backend("groups"), lambda: tuple(source.fifo_groups(now))),
        "dead_letters": Part(source.backend("dead_letters"), lambda: source.dead_letters(now)),
        "scheduled": Part(source.backend("scheduled"), lambda: source.scheduled(now)),
        "dedup": Part(source.backend("dedup"), source.dedup),
        # After the groups: the backlog chart includes this sample too.
        "history": Part(source.backend("history"), lambda: source.history(now), key + "groups"),
        "store": Part(source.backend("store"), lambda: source.store(now)),
        "consumers": Part(source.backend("consumers"), lambda: source.consumers(now)),
    }
    backlog_parts = {f"backlog{i}": p for i, p in enumerate(source.backlogs(now))}
    keyed = {key + name: part for name, part in {**parts, **backlog_parts}.items()}
    read = {name[len(key) :]: value for name, value in reader.read(keyed).items()}
    problems = tuple(sorted((n, v.reason) for n, v in read.items() if isinstance(v, Unavailable)))

    def value(name: str, empty: Any) -> Any:
        return empty if isinstance(read[name], Unavailable) else read[name]

    return StatusSnapshot(
        taken_at=now,
        consumer=source.consumer,
        groups=value("groups", ()),
        dead_letters=value("dead_letters", DeadLetterCounts("", exists=True)),
        scheduled=value("scheduled", ScheduledCount(queue=None)),
        dedup=value("dedup", DedupRate(0, 0)),
        history=value("history", History()),
        store=value("store", None),
        backlogs=tuple(read[name] for name in backlog_parts),
        consumers=read["consumers"],
        problems=problems,
    )
