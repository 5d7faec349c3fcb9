"""In-memory stats store: one process, for unit tests and the memory dedup backend."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping


class MemoryStatsStore:
    """Counters in a dict behind a lock."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def add(self, deltas: Mapping[str, int]) -> None:
        with self._lock:
            self._counts.update(deltas)

    def totals(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)
