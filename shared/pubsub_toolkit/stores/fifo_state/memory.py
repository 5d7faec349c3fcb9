"""In-memory FIFO gate store: for unit tests and single-process consumers."""

from __future__ import annotations

import threading
from dataclasses import replace

from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.fifo_state.base import GroupState, listed


class MemoryFifoStore:
    """Dicts behind one lock. A version is a fresh object per write, equal only to itself: a
    store handed back an older state (the simulation rolls this one back) can never issue a
    version again, so a compare-and-set against a version from before the loss fails (no ABA),
    as with the Redis store's write ids.

    A record whose ``expire_at`` has passed on ``clock`` (a complete group's tombstone) is
    forgotten with its parked copies, as Redis's ``PEXPIREAT`` would: a long-running consumer
    must not keep every group it ever finished.
    """

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._states: dict[tuple[str, str], GroupState] = {}
        self._parked: dict[tuple[str, str, int], Message] = {}

    def load(self, consumer: str, group: str) -> GroupState:
        with self._lock:
            return self._current(consumer, group)

    def save(
        self, consumer: str, group: str, state: GroupState, expected: GroupState
    ) -> GroupState | None:
        with self._lock:
            current = self._current(consumer, group)
            if current.version != expected.version:
                return None
            stored = replace(state, version=_Version())
            self._states[(consumer, group)] = stored
            return stored

    def park(self, consumer: str, group: str, seq: int, message: Message) -> None:
        with self._lock:
            self._parked.setdefault((consumer, group, seq), message)

    def parked_message(self, consumer: str, group: str, seq: int) -> Message | None:
        with self._lock:
            return self._parked.get((consumer, group, seq))

    def unpark(self, consumer: str, group: str, seq: int) -> None:
        with self._lock:
            self._parked.pop((consumer, group, seq), None)

    def groups(self, consumer: str) -> list[str]:
        with self._lock:
            now = self._clock.now()
            return sorted(
                g
                for (c, g), state in self._states.items()
                if c == consumer and not state.expired(now) and listed(state)
            )

    def _current(self, consumer: str, group: str) -> GroupState:
        """The record (under the lock), an expired one deleted first with its parked copies."""
        state = self._states.get((consumer, group))
        if state is None:
            return GroupState()
        if state.expired(self._clock.now()):
            del self._states[(consumer, group)]
            for key in [k for k in self._parked if k[:2] == (consumer, group)]:
                del self._parked[key]
            return GroupState()
        return state


class _Version:
    """An opaque compare-and-set token: equal only to itself."""

    __slots__ = ()


class AsyncMemoryFifoStore:
    """The in-memory store behind the :class:`~.base.AsyncFifoStore` protocol (tests and
    single-process use): nothing to await, so each call runs at once under the store's lock."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK, *, store: MemoryFifoStore | None = None):
        self.sync = store or MemoryFifoStore(clock)

    async def load(self, consumer: str, group: str) -> GroupState:
        return self.sync.load(consumer, group)

    async def save(
        self, consumer: str, group: str, state: GroupState, expected: GroupState
    ) -> GroupState | None:
        return self.sync.save(consumer, group, state, expected)

    async def park(self, consumer: str, group: str, seq: int, message: Message) -> None:
        self.sync.park(consumer, group, seq, message)

    async def parked_message(self, consumer: str, group: str, seq: int) -> Message | None:
        return self.sync.parked_message(consumer, group, seq)

    async def unpark(self, consumer: str, group: str, seq: int) -> None:
        self.sync.unpark(consumer, group, seq)

    async def groups(self, consumer: str) -> list[str]:
        return self.sync.groups(consumer)
