"""A process's own memory of what it wrote, to catch a store that lost acknowledged writes.

Redis without persistence, an eviction, or a Memorystore failover (replication is
asynchronous) can hand back an *older* state than the one a process just wrote: a dedup record
that was ``done`` is gone, a FIFO group's last-processed number goes backwards, parked messages
vanish. Nothing in the stored data shows it. But the process that wrote the newer state still
remembers it, so each process keeps a bounded witness of its recent writes and compares every
read against it: the FIFO gate restores a group's position (and alerts, naming any parked
messages that were lost), the idempotent processor refuses to run an effect again whose
``done`` record it wrote itself. A process that restarted after the loss remembers nothing:
that residue is the weaker guarantee the README states ("What a store can lose").
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

DEFAULT_CAPACITY = 10_000  # entries; a few MB at most


class Witness(Generic[K, V]):
    """A thread-safe LRU map of the most recent ``capacity`` entries."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)

    def items(self) -> list[tuple[K, V]]:
        """The entries remembered, oldest first."""
        with self._lock:
            return list(self._entries.items())
