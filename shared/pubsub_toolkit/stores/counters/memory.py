"""In-memory sequence counter: first-class for unit tests and single-process use (not shared)."""

from __future__ import annotations

import threading
import time

from pubsub_toolkit.stores.counters.base import SequenceBlock, check_group, check_reservation


class MemorySequenceCounter:
    """A dict of per-group highest numbers behind one lock; the lock makes reserve atomic."""

    def __init__(self) -> None:
        self._last: dict[str, int] = {}
        self._epochs: dict[str, int] = {}
        self._lock = threading.Lock()

    def reserve(self, group: str, count: int = 1) -> SequenceBlock:
        check_reservation(group, count)
        with self._lock:
            if group not in self._epochs:
                # A new counter's epoch: microseconds, so a counter made again (a new instance
                # standing for a lost store) is newer than the one it replaces.
                self._epochs[group] = _new_epoch()
            last = self._last.get(group, 0) + count
            self._last[group] = last
        return SequenceBlock.ending_at(group, last, count, self._epochs[group])

    def current(self, group: str) -> int:
        check_group(group)
        with self._lock:
            return self._last.get(group, 0)


_epoch_lock = threading.Lock()
_newest_epoch = 0


def _new_epoch() -> int:
    """Now in microseconds, strictly above every epoch this process handed out before."""
    global _newest_epoch  # noqa: PLW0603 - one process-wide high-water mark, under its lock
    with _epoch_lock:
        _newest_epoch = max(time.time_ns() // 1000, _newest_epoch + 1)
        return _newest_epoch
