"""The in-process backend: first-class for unit tests and single-process use (not shared).

Its stores are made once and handed out again, so everything made by one MemoryBackend sees
the same records - as two workers on one Redis would.
"""

from __future__ import annotations

import threading
from datetime import timedelta

from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.config import DEFAULT_TTL_SECONDS
from pubsub_toolkit.stores.counters.memory import MemorySequenceCounter
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from pubsub_toolkit.stores.stats.base import INGRESS_SCOPE
from pubsub_toolkit.stores.stats.memory import MemoryStatsStore


class MemoryBackend:
    """Every store in this process's memory; ``clock`` is the dedup store's."""

    name = "memory"

    def __init__(self, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._dedup = MemoryDedupStore(clock)
        self._fifo = MemoryFifoStore()
        # Forgets an idle group as the Redis counter does (DEDUP_TTL's default).
        ttl = timedelta(seconds=DEFAULT_TTL_SECONDS)
        self._counter = MemorySequenceCounter(ttl=ttl, clock=clock)
        self._stats: dict[str, MemoryStatsStore] = {}
        self._lock = threading.Lock()

    def dedup_store(self) -> MemoryDedupStore:
        return self._dedup

    def fifo_store(self) -> MemoryFifoStore:
        return self._fifo

    def counter(self) -> MemorySequenceCounter:
        return self._counter

    def stats_store(self, *, scope: str = INGRESS_SCOPE) -> MemoryStatsStore:
        with self._lock:
            return self._stats.setdefault(scope, MemoryStatsStore())

    def close(self) -> None:
        """Nothing to release."""
