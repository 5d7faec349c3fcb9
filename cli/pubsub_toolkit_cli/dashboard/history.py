"""The last hour, minute by minute: what the status page charts.

Counts per minute come from the stats store's minute buckets (:mod:`pubsub_toolkit.stores.stats`,
written by every ingress instance's :class:`~pubsub_toolkit.stats.CounterFlusher`):
deliveries, duplicates and dead letters; delay lateness p50/p99 from the histogram's bucket
counts of each minute (a bucket's upper bound, as :meth:`Histogram.quantile` gives). The
per-group backlog (parked messages) is not a counter: :class:`BacklogHistory` samples the FIFO
groups each time the page takes a snapshot and keeps the last sample of each minute, so it
covers the time this page has been running.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from pubsub_toolkit.observability import BUCKETS, LATENESS, Histogram
from pubsub_toolkit.stores.stats.base import (
    BUCKET_MARK,
    DEAD_LETTERED,
    DELIVERIES,
    DUPLICATES,
    minute_of,
)
from pubsub_toolkit_cli.group_status import GroupStatus

WINDOW_MINUTES = 60
BUSIEST_GROUPS = 5  # groups charted: the most parked messages at any minute of the window
TRACKED_GROUPS = 200  # groups a BacklogHistory keeps samples of


def window(now: datetime, minutes: int = WINDOW_MINUTES) -> tuple[datetime, ...]:
    """The ``minutes`` minute starts ending with ``now``'s, oldest first."""
    last = minute_of(now)
    return tuple(last - timedelta(minutes=minutes - 1 - i) for i in range(minutes))


@dataclass(frozen=True)
class History:
    """Per-minute series over ``minutes`` (every tuple is aligned with it)."""

    minutes: tuple[datetime, ...] = ()
    deliveries: tuple[int, ...] = ()
    duplicates: tuple[int, ...] = ()
    dead_letters: tuple[int, ...] = ()
    lateness_p50: tuple[float | None, ...] = ()  # None: nothing released that minute
    lateness_p99: tuple[float | None, ...] = ()
    releases: tuple[int, ...] = ()  # how many lateness observations each minute holds
    backlog: tuple[tuple[str, tuple[int | None, ...]], ...] = ()  # busiest groups; None: unseen
    # Over the whole window (every minute's histogram added up): the figures beside the chart.
    hour_lateness_p50: float | None = None
    hour_lateness_p99: float | None = None

    @classmethod
    def build(
        cls,
        now: datetime,
        buckets: Mapping[datetime, Mapping[str, int]],
        backlog: Mapping[str, Mapping[datetime, int]] = {},  # read only
        relay: Mapping[datetime, Mapping[str, int]] = {},  # read only
        *,
        minutes: int = WINDOW_MINUTES,
        busiest: int = BUSIEST_GROUPS,
    ) -> History:
        """The series for the window ending at ``now`` from the ingress scope's minute
        ``buckets``, per-group ``backlog`` samples (group -> minute -> parked) and the relay
        scope's minute buckets (``relay``: the lateness histogram)."""
        span = window(now, minutes)
        rows = [buckets.get(m, {}) for m in span]
        lateness = [_histogram({**relay.get(m, {}), **buckets.get(m, {})}, LATENESS) for m in span]
        charted = sorted(
            (g for g in backlog if any(backlog[g].get(m) for m in span)),
            key=lambda g: (-max(backlog[g].get(m, 0) for m in span), g),
        )[:busiest]
        hour = Histogram(tuple(map(sum, zip(*(h.counts for h in lateness), strict=True))))
        return cls(
            minutes=span,
            deliveries=tuple(row.get(DELIVERIES, 0) for row in rows),
            duplicates=tuple(row.get(DUPLICATES, 0) for row in rows),
            dead_letters=tuple(row.get(DEAD_LETTERED, 0) for row in rows),
            lateness_p50=tuple(h.quantile(0.5) for h in lateness),
            lateness_p99=tuple(h.quantile(0.99) for h in lateness),
            releases=tuple(h.count for h in lateness),
            backlog=tuple((g, tuple(backlog[g].get(m) for m in span)) for g in charted),
            hour_lateness_p50=hour.quantile(0.5),
            hour_lateness_p99=hour.quantile(0.99),
        )

    def to_json(self) -> dict[str, object]:
        return {
            "minutes": [m.isoformat() for m in self.minutes],
            "deliveries": list(self.deliveries),
            "duplicates": list(self.duplicates),
            "dead_letters": list(self.dead_letters),
            "lateness_p50_s": list(self.lateness_p50),
            "lateness_p99_s": list(self.lateness_p99),
            "hour_lateness_p50_s": self.hour_lateness_p50,
            "hour_lateness_p99_s": self.hour_lateness_p99,
            "releases": list(self.releases),
            "backlog": {group: list(values) for group, values in self.backlog},
        }


def _histogram(row: Mapping[str, int], name: str) -> Histogram:
    prefix = f"{name}{BUCKET_MARK}"
    counts = [0] * (len(BUCKETS) + 1)
    for key, count in row.items():
        if key.startswith(prefix):
            index = key[len(prefix) :]
            if index.isdigit() and int(index) < len(counts):
                counts[int(index)] += count
    return Histogram(tuple(counts))


@dataclass
class BacklogHistory:
    """Parked messages per group, the last sample of each minute, for the last ``minutes``."""

    minutes: int = WINDOW_MINUTES
    tracked: int = TRACKED_GROUPS
    samples: dict[str, dict[datetime, int]] = field(default_factory=dict)

    def record(self, now: datetime, rows: Sequence[GroupStatus]) -> None:
        """Note each listed group's parked count at ``now``; a group charted before and no
        longer listed (its work is done, or its record expired) is noted as 0."""
        minute = minute_of(now)
        listed = {row.group: row.parked for row in rows}
        for group in set(self.samples) | set(listed):
            self.samples.setdefault(group, {})[minute] = listed.get(group, 0)
        oldest = minute - timedelta(minutes=self.minutes - 1)
        for group in list(self.samples):
            kept = {m: n for m, n in self.samples[group].items() if m >= oldest}
            if any(kept.values()):
                self.samples[group] = kept
            else:
                del self.samples[group]  # nothing parked in the window: stop following it
        if len(self.samples) > self.tracked:
            keep = sorted(self.samples, key=lambda g: (-max(self.samples[g].values()), g))
            self.samples = {g: self.samples[g] for g in keep[: self.tracked]}
