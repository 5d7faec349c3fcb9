"""The stats store protocol: add counter deltas (to the totals and to one minute's bucket), read
the totals over every writer and the per-minute buckets of the last hour or so."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Protocol

INGRESS_SCOPE = "ingress"  # whose counters: ingress's (deliveries, duplicates, dead letters)
RELAY_SCOPE = "relay"  # the relay's (delay lateness), kept apart: its outcomes share names
DELIVERIES = "deliveries"  # every delivery ingress handled, valid or not
DUPLICATES = "duplicate"  # the dedup outcome's name: deliveries dropped as duplicates
DEAD_LETTERED = "dead_lettered"  # the dead-letter outcome's name (by reason: "dead_lettered.R")
# A histogram's bucket i (see observability.BUCKETS) in a minute's bucket: f"{name}.bucket.{i}".
BUCKET_MARK = ".bucket."
# Per-minute buckets live this long after their minute (then expire: Redis EXPIRE, a Firestore
# TTL policy on ``expire_at``, pruning in memory). Readers ask for the last hour.
SERIES_RETENTION = timedelta(minutes=90)


def minute_of(moment: datetime) -> datetime:
    """The start of ``moment``'s minute (the key of its bucket)."""
    return datetime(
        moment.year, moment.month, moment.day, moment.hour, moment.minute, tzinfo=moment.tzinfo
    )


def minute_key(minute: datetime) -> str:
    """A minute as a sortable key, ``YYYYMMDDHHMM`` (UTC)."""
    return minute.strftime("%Y%m%d%H%M")


def minutes_between(since: datetime, until: datetime) -> list[datetime]:
    """Every minute start from ``since``'s minute up to and including ``until``'s."""
    first, last = minute_of(since), minute_of(until)
    count = int((last - first) / timedelta(minutes=1)) + 1
    return [first + timedelta(minutes=i) for i in range(max(count, 0))]


class StatsStore(Protocol):
    """Shared counters of one scope. One module per backend."""

    def add(
        self,
        deltas: Mapping[str, int],
        per_minute: Mapping[str, int] | None = None,
        *,
        minute: datetime | None = None,
    ) -> None:
        """Add ``deltas`` (name -> increment) to this writer's totals and, given ``minute``,
        ``per_minute`` (default ``deltas``) to that minute's bucket - atomically per call, in
        one write (one round trip)."""
        ...

    def totals(self) -> dict[str, int]:
        """Every counter summed over all writers (missing names are simply absent)."""
        ...

    def minutes(self, since: datetime, until: datetime) -> dict[datetime, dict[str, int]]:
        """The buckets of the minutes from ``since`` to ``until`` (inclusive), summed over all
        writers; minutes nobody wrote (or expired) are absent."""
        ...
