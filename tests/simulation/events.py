"""The one scheduler: a heap of timed events on virtual time, run one at a time.

Every action in the simulation - a delivery, a task execution, a producer's publish, a sweep,
a cancel, a fault starting - is an :class:`Event`. The loop pops the earliest, moves true time
to it, and runs it. Single-threaded, so every run is reproducible from the seed.

**Interleavings.** Real components run concurrently; races happen *between* two steps of one
component. So every boundary a component crosses (a store call, a publish, the handler) is a
:meth:`EventLoop.yield_point`: with the schedule's interleave rate, one other due event runs
right there, nested, before the step continues - e.g. a ``cancel()`` between the relay's
tombstone check and its publish. Nesting is one level deep (two operations in flight at once),
three with ``deep_interleave`` (four at once); ``peak_depth`` records how many a schedule
actually had in flight together. :meth:`EventLoop.sleep` (a
component waiting on its clock) lets a few due events run the same way.

*Background* events (the consumers' periodic sweeps) do not keep the system "busy": quiescence
is "no foreground event left".
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.simulation.process import ProcessCrashed

_SLEEP_EVENTS = 4  # due events run while a component sleeps (bounded)


@dataclass(frozen=True, order=True)
class _Entry:
    at: float
    order: int
    event: Event = field(compare=False)


@dataclass(frozen=True)
class Event:
    """Something that happens at a time: ``run`` does it."""

    label: str
    run: Callable[[], None]
    background: bool = False


class EventLoop:
    """Virtual time and the event heap. ``now`` is true time in seconds since the epoch."""

    def __init__(self, rng: random.Random, *, interleave_rate: float, window: float = 2.0) -> None:
        self.now = 0.0
        self._rng = rng
        self._heap: list[_Entry] = []
        self._order = 0
        self._foreground = 0
        self._depth = 0
        self.interleave_rate = interleave_rate
        self.window = window
        self.executed = 0
        self.max_depth = 1  # how deep events nest (deep_interleave: 3, four actors overlap)
        self.peak_depth = 0  # the most events that were running at once (nested), so far
        self.on_event: Callable[[Event], None] | None = None

    # --- scheduling ----------------------------------------------------------------------

    def at(self, when: float, label: str, run: Callable[[], None], *, background: bool = False):
        """Run ``run`` at true time ``when`` (never in the past)."""
        self._order += 1
        entry = _Entry(max(when, self.now), self._order, Event(label, run, background))
        heapq.heappush(self._heap, entry)
        if not background:
            self._foreground += 1

    def after(
        self, delay: float, label: str, run: Callable[[], None], *, background: bool = False
    ) -> None:
        self.at(self.now + delay, label, run, background=background)

    @property
    def busy(self) -> bool:
        """True while any foreground event is still to run."""
        return self._foreground > 0

    def next_time(self) -> float | None:
        return self._heap[0].at if self._heap else None

    # --- running -------------------------------------------------------------------------

    def run_next(self) -> bool:
        """Run the earliest event; False when there is none."""
        if not self._heap:
            return False
        self._execute(self._pop())
        return True

    def yield_point(self) -> None:
        """A component is between two steps: maybe let one other due event run here."""
        if (
            not 1 <= self._depth <= self.max_depth
            or not self._heap
            or self._rng.random() >= self.interleave_rate
        ):
            return
        if self._heap[0].at <= self.now + self.window:
            self._execute(self._pop())

    def sleep(self, seconds: float, events: int = _SLEEP_EVENTS) -> None:
        """A component waits ``seconds``: time passes, and a few due events (at most
        ``events``) run meanwhile."""
        until = self.now + seconds
        ran = 0
        while (
            1 <= self._depth <= self.max_depth
            and ran < events
            and self._heap
            and self._heap[0].at <= until
        ):
            self._execute(self._pop())
            ran += 1
        self.now = max(self.now, until)

    def _pop(self) -> _Entry:
        entry = heapq.heappop(self._heap)
        if not entry.event.background:
            self._foreground -= 1
        return entry

    def _execute(self, entry: _Entry) -> None:
        self.now = max(self.now, entry.at)
        self.executed += 1
        if self.on_event is not None:
            self.on_event(entry.event)
        self._depth += 1
        self.peak_depth = max(self.peak_depth, self._depth)
        try:
            entry.event.run()
        except ProcessCrashed:
            pass  # the crashed process was already marked dead and its restart scheduled
        finally:
            self._depth -= 1
