"""Time sources. Everything that compares against "now" takes a clock so tests can move time."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """The current time as a timezone-aware UTC datetime, and a way to wait on it.

    Waiting goes through the clock too, so a simulation (tests/simulation) or a test with a
    manual clock never blocks on the wall clock.
    """

    def now(self) -> datetime: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The wall clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class ManualClock:
    """A clock that only moves when told to; for tests of leases and expiry."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2030, 1, 1, tzinfo=UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def sleep(self, seconds: float) -> None:
        """Waiting on a manual clock moves it: nothing else would."""
        self.advance(timedelta(seconds=seconds))

    def advance(self, delta: timedelta) -> None:
        """Move time forward by ``delta``."""
        with self._lock:
            self._now += delta


SYSTEM_CLOCK = SystemClock()
