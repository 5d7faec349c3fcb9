"""Virtual time: one true clock for the whole simulation, and each component's skewed view.

True time is a float of seconds since :data:`EPOCH`, owned by the event loop. A component never
sees it directly: it gets a :class:`SimClock`, the library's ``Clock`` protocol, offset by that
component's skew (its machine's clock is early or late by a few seconds). ``sleep`` never
blocks: it lets virtual time pass - and lets other due events run meanwhile, as other processes
would - through the loop.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol

EPOCH = datetime(2030, 1, 1, tzinfo=UTC)


def to_datetime(seconds: float) -> datetime:
    """True (or skewed) seconds since EPOCH as an aware datetime."""
    return EPOCH + timedelta(seconds=seconds)


def to_seconds(moment: datetime) -> float:
    """An aware datetime as seconds since EPOCH."""
    return (moment - EPOCH).total_seconds()


class TimeSource(Protocol):
    """What a SimClock needs from the event loop."""

    now: float

    def sleep(self, seconds: float) -> None: ...


class SimClock:
    """A component's clock: true time plus ``skew`` seconds (negative = behind)."""

    def __init__(self, source: TimeSource, skew: float = 0.0) -> None:
        self._source = source
        self.skew = skew

    def now(self) -> datetime:
        return to_datetime(self._source.now + self.skew)

    def sleep(self, seconds: float) -> None:
        """Let ``seconds`` of virtual time pass (other due events may run meanwhile)."""
        if seconds > 0:
            self._source.sleep(seconds)


class CallerClock:
    """The database's clock: the calling component's own clock, as with Redis and Firestore
    backends, which compare leases and expiry against the client's time."""

    def __init__(self, default: SimClock) -> None:
        self._active = default

    def use(self, clock: SimClock) -> None:
        self._active = clock

    def now(self) -> datetime:
        return self._active.now()

    def sleep(self, seconds: float) -> None:
        self._active.sleep(seconds)
