"""A FIFO store wrapper that counts what the gate asks of its store: reads and writes.

The figures it gives do not depend on the machine: they are the gate's protocol calls, and
they map one to one onto a backend's billed operations - on Firestore a ``load`` or a
``parked_message`` is one document read, a ``save``, ``park`` or ``unpark`` one document write
(or delete), and a ``groups()`` listing costs one read per group it returns (at least one per
query, as Firestore bills queries); on Redis each call is one round trip. The FIFO benchmark
and the write-budget tests wrap the store with it.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.fifo_state.base import FifoStore, GroupState

READS = ("load", "parked_message", "groups")
WRITES = ("save", "park", "unpark")


class CountingFifoStore:
    """``store``, with every call counted by name (thread-safe)."""

    def __init__(self, store: FifoStore) -> None:
        self.inner = store
        self.calls: Counter[str] = Counter()
        self.listed = 0  # groups returned by groups() calls (Firestore bills a read for each)
        self._lock = threading.Lock()

    def reset(self) -> None:
        with self._lock:
            self.calls.clear()
            self.listed = 0

    @property
    def writes(self) -> int:
        return sum(self.calls[name] for name in WRITES)

    @property
    def reads(self) -> int:
        """Document reads as Firestore bills them: a listing costs what it returns (>= 1)."""
        listing = max(self.calls["groups"], self.listed)
        return self.calls["load"] + self.calls["parked_message"] + listing

    def _count(self, name: str) -> None:
        with self._lock:
            self.calls[name] += 1

    def load(self, consumer: str, group: str) -> GroupState:
        self._count("load")
        return self.inner.load(consumer, group)

    def save(
        self, consumer: str, group: str, state: GroupState, expected: GroupState
    ) -> GroupState | None:
        self._count("save")
        return self.inner.save(consumer, group, state, expected)

    def park(self, consumer: str, group: str, seq: int, message: Message) -> None:
        self._count("park")
        self.inner.park(consumer, group, seq, message)

    def parked_message(self, consumer: str, group: str, seq: int) -> Message | None:
        self._count("parked_message")
        return self.inner.parked_message(consumer, group, seq)

    def unpark(self, consumer: str, group: str, seq: int) -> None:
        self._count("unpark")
        self.inner.unpark(consumer, group, seq)

    def groups(self, consumer: str) -> list[str]:
        self._count("groups")
        found = self.inner.groups(consumer)
        with self._lock:
            self.listed += len(found)
        return found

    def __getattr__(self, name: str) -> Any:
        # commit_with (Firestore's transactional mode) and anything else: passed through,
        # counted as one write (the commit is one).
        attribute = getattr(self.inner, name)
        if name == "commit_with":

            def counted(*args: Any, **kwargs: Any) -> Any:
                self._count("save")
                return attribute(*args, **kwargs)

            return counted
        return attribute
