"""One database - think "one Redis" - holding the three memory stores, and its rollback.

The stores' *logic* is the library's own: :class:`MemoryDedupStore`, :class:`MemoryFifoStore`
and :class:`MemorySequenceCounter` run unchanged. What this module adds is what a real
database does to them:

* **rollback** (a Redis restart without persistence, a failover to a replica that had not seen
  the last writes): after each write the stores' internal dicts are copied (shallowly: their
  values are immutable records), and :meth:`Database.rollback` restores the state as of N
  writes ago across all three stores at once - counters, gate states, parked messages, dedup
  records alike. Counters roll back too, as Redis's per-key numbers would; the FIFO store's
  versions are never issued twice (as the Redis store's write ids), so a compare-and-set
  against a version from before the loss fails instead of matching a reissued one (ABA).
* **the 64-bit integer range** that Firestore and Redis integers have: a FIFO store call with a
  number outside it fails (``ValueError``, as the Firestore client's "Value out of range").

Outages and timeouts are injected per call by :mod:`.boundaries`, which every store call of
every process goes through (see :class:`StoreView`).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import deque
from collections.abc import Callable
from typing import Any

from pubsub_toolkit.stores.counters.memory import MemorySequenceCounter
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from pubsub_toolkit.stores.fifo_state.base import GroupState
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.simulation.clock import CallerClock
from tests.simulation.components import TTL

MAX_ROLLBACK_WRITES = 20
INT64_MAX = 2**63 - 1
# Store methods that only read; every other call is counted as a write.
READ_METHODS = frozenset({"get", "load", "parked_message", "groups", "current"})

_Snapshot = tuple[dict[str, Any], ...]


class _FifoStore(MemoryFifoStore):
    """The memory FIFO store, remembering each group's last record: an idle group's record
    expires a retention after it went quiet, and the final check wants where it stopped."""

    def __init__(self, clock: Any) -> None:
        super().__init__(clock=clock)
        self.last_saved: dict[tuple[str, str], GroupState] = {}

    def save(
        self, consumer: str, group: str, state: GroupState, expected: GroupState
    ) -> GroupState | None:
        stored = super().save(consumer, group, state, expected)
        if stored is not None:
            self.last_saved[(consumer, group)] = stored
        return stored


class Database:
    """The shared state every process talks to, with a bounded history for rollbacks."""

    def __init__(self, clock: CallerClock, *, keep_history: bool) -> None:
        self.clock = clock
        self.dedup = MemoryDedupStore(clock=clock)  # type: ignore[arg-type]
        self.fifo = _FifoStore(clock)
        # An idle group's counter expires with the consumer's TTL, as on Redis (issue 24, defect 4).
        self.counter = MemorySequenceCounter(ttl=TTL, clock=clock)  # type: ignore[arg-type]
        self.writes = 0
        self._keep_history = keep_history
        self._history: deque[_Snapshot] = deque(maxlen=MAX_ROLLBACK_WRITES + 1)
        if keep_history:
            self._history.append(self._snapshot())

    def fifo_position(self, consumer: str, group: str) -> GroupState:
        """The group's record, or - once it expired - the last one written."""
        state = self.fifo.load(consumer, group)
        if state.version is None:
            return self.fifo.last_saved.get((consumer, group), state)
        return state

    def target(self, name: str) -> Any:
        return {"dedup": self.dedup, "fifo": self.fifo, "counter": self.counter}[name]

    def after_write(self) -> None:
        """Called after every write call: count it, and keep the state for rollbacks."""
        self.writes += 1
        if self._keep_history:
            self._history.append(self._snapshot())

    def rollback(self, writes: int) -> int:
        """Restore the state as of ``writes`` writes ago; returns how many were lost."""
        if not self._history:
            return 0
        lost = min(writes, len(self._history) - 1)
        snapshot = self._history[-1 - lost]
        for _ in range(lost):
            self._history.pop()
        for store, saved in zip(self._stores(), snapshot, strict=True):
            for name, value in saved.items():
                setattr(store, name, _restore(value))
        return lost

    def wipe(self) -> int:
        """The database restarts empty (no persistence): every record and counter is gone
        (the FIFO store's version numbers are never reissued: a conservative model). Returns
        how many records were lost."""
        lost = 0
        for store in self._stores():
            for name, value in list(vars(store).items()):
                if isinstance(value, dict):
                    lost += len(value)
                    setattr(store, name, {})
        if self._keep_history:
            self._history.clear()
            self._history.append(self._snapshot())
        return lost

    def _stores(self) -> tuple[object, ...]:
        return (self.dedup, self.fifo, self.counter)

    def _snapshot(self) -> _Snapshot:
        return tuple(
            {name: _copy(value) for name, value in vars(store).items() if _restorable(value)}
            for store in self._stores()
        )


def _restorable(value: object) -> bool:
    return isinstance(value, dict | itertools.count)


def _copy(value: Any) -> Any:
    if isinstance(value, itertools.count):
        return ("count", int(repr(value)[len("count(") : -1]))
    return dict(value)


def _restore(value: Any) -> Any:
    if isinstance(value, tuple):
        return itertools.count(value[1])
    return dict(value)


def check_int64(args: tuple[Any, ...]) -> None:
    """Refuse a call carrying a number beyond the 64-bit range (in a GroupState too)."""
    for value in args:
        for number in _numbers(value):
            if not -INT64_MAX - 1 <= number <= INT64_MAX:
                raise ValueError(f"Value out of range: {number}")


def _numbers(value: Any) -> list[int]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, tuple | list):
        return [n for item in value for n in _numbers(item)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [n for f in dataclasses.fields(value) for n in _numbers(getattr(value, f.name))]
    return []


class StoreView:
    """One process's connection to one of the database's stores.

    Any method of the underlying store can be called; each call is one boundary
    (``call(process, "fifo.save", apply, is_read)``), where faults are injected.
    """

    def __init__(
        self,
        name: str,
        target: object,
        call: Callable[..., Any],
        note: Callable[[str, tuple[Any, ...], Any], None] | None = None,
    ) -> None:
        self._name = name
        self._target = target
        self._call = call
        self._note = note  # told (method, args, reply) of each write as it lands

    def __getattr__(self, method: str) -> Any:
        real = getattr(self._target, method)
        if not callable(real):
            return real
        op = f"{self._name}.{method}"
        is_read = method in READ_METHODS
        check = self._name == "fifo" and not is_read

        note = None if is_read else self._note

        def apply(*args: Any, **kwargs: Any) -> Any:
            reply = real(*args, **kwargs)
            if note is not None:
                note(method, args, reply)  # landed, whatever the caller hears of it
            return reply

        def call(*args: Any, **kwargs: Any) -> Any:
            if check:
                check_int64(args)
            return self._call(op, lambda: apply(*args, **kwargs), is_read)

        return call
