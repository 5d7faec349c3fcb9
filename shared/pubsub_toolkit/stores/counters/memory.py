"""In-memory sequence counter: first-class for unit tests and single-process use (not shared)."""

from __future__ import annotations

import threading

from pubsub_toolkit.stores.counters.base import SequenceBlock, check_group, check_reservation


class MemorySequenceCounter:
    """A dict of per-group highest numbers behind one lock; the lock makes reserve atomic."""

    def __init__(self) -> None:
        self._last: dict[str, int] = {}
        self._lock = threading.Lock()

    def reserve(self, group: str, count: int = 1) -> SequenceBlock:
        check_reservation(group, count)
        with self._lock:
            last = self._last.get(group, 0) + count
            self._last[group] = last
        return SequenceBlock.ending_at(group, last, count)

    def current(self, group: str) -> int:
        check_group(group)
        with self._lock:
            return self._last.get(group, 0)
