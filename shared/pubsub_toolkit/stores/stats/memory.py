"""In-memory stats store: one process, for unit tests and the memory dedup backend."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping
from datetime import datetime

from pubsub_toolkit.stores.stats.base import SERIES_RETENTION, minute_of


class MemoryStatsStore:
    """Counters in a dict behind a lock; minute buckets older than ``SERIES_RETENTION`` before
    the newest one written are dropped."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._minutes: dict[datetime, Counter[str]] = {}
        self._lock = threading.Lock()

    def add(
        self,
        deltas: Mapping[str, int],
        per_minute: Mapping[str, int] | None = None,
        *,
        minute: datetime | None = None,
    ) -> None:
        with self._lock:
            self._counts.update(deltas)
            if minute is None:
                return
            start = minute_of(minute)
            self._minutes.setdefault(start, Counter()).update(
                deltas if per_minute is None else per_minute
            )
            for old in [m for m in self._minutes if m < start - SERIES_RETENTION]:
                del self._minutes[old]

    def totals(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def minutes(self, since: datetime, until: datetime) -> dict[datetime, dict[str, int]]:
        first, last = minute_of(since), minute_of(until)
        with self._lock:
            return {m: dict(c) for m, c in self._minutes.items() if first <= m <= last and c}
