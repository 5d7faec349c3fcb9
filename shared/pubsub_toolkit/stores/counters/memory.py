"""In-memory sequence counter: first-class for unit tests and single-process use (not shared)."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta

from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.stores.counters.base import SequenceBlock, check_group, check_reservation


class MemorySequenceCounter:
    """A dict of per-group highest numbers behind one lock; the lock makes reserve atomic.

    ``ttl``: how long a group's counter outlives its last reservation, as the Redis counter's
    key does (the consumer's ``DEDUP_TTL``): an expired counter starts again at 1 in a new
    epoch, as the idle group's state has expired too. ``None``: it never expires."""

    def __init__(self, *, ttl: timedelta | None = None, clock: Clock = SYSTEM_CLOCK) -> None:
        self._last: dict[str, int] = {}
        self._epochs: dict[str, int] = {}
        self._expire_at: dict[str, datetime] = {}
        self._ttl, self._clock = ttl, clock
        self._lock = threading.Lock()

    def _forget_if_expired(self, group: str, now: datetime) -> None:
        expire_at = self._expire_at.get(group)
        if expire_at is not None and now >= expire_at:
            for entries in (self._last, self._epochs, self._expire_at):
                entries.pop(group, None)

    def reserve(self, group: str, count: int = 1) -> SequenceBlock:
        check_reservation(group, count)
        now = self._clock.now()
        with self._lock:
            self._forget_if_expired(group, now)
            if self._ttl is not None:
                self._expire_at[group] = now + self._ttl
            if group not in self._epochs:
                # A new counter's epoch: microseconds, so a counter made again (a new instance
                # standing for a lost store) is newer than the one it replaces.
                self._epochs[group] = _new_epoch()
            last = self._last.get(group, 0) + count
            self._last[group] = last
        return SequenceBlock.ending_at(group, last, count, self._epochs[group])

    def current(self, group: str) -> int:
        check_group(group)
        now = self._clock.now()
        with self._lock:
            self._forget_if_expired(group, now)
            return self._last.get(group, 0)


_epoch_lock = threading.Lock()
_newest_epoch = 0


def _new_epoch() -> int:
    """Now in microseconds, strictly above every epoch this process handed out before."""
    global _newest_epoch  # noqa: PLW0603 - one process-wide high-water mark, under its lock
    with _epoch_lock:
        _newest_epoch = max(time.time_ns() // 1000, _newest_epoch + 1)
        return _newest_epoch
