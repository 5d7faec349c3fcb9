"""In-memory dedup store: first-class for unit tests and single-process use (not shared).

The decisions are :mod:`.claims`' (the one claim loop); this module performs its primitives on
a dict, each under one lock, so every primitive is atomic and a compare-and-set compares the
whole record (the record itself is its version).
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import TypeVar

from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.stores.dedup import claims
from pubsub_toolkit.stores.dedup.base import Claim, DedupRecord
from pubsub_toolkit.stores.dedup.claims import CreateOrGet, Found, Op, Replace, Reply, Stored

_STORED = Stored()
T = TypeVar("T")


class MemoryDedupStore(claims.ClaimLoop[tuple[str, str]]):
    """A dict behind one lock; the lock makes each primitive of the claim loop atomic."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self._records: dict[tuple[str, str], DedupRecord] = {}
        self._lock = threading.Lock()

    def _key(self, namespace: str, key: str) -> tuple[str, str]:
        return namespace, key

    def _drive(self, protocol: claims.Protocol[T], at: tuple[str, str]) -> T:
        # claims.run's loop, with the record's address passed directly rather than bound in a
        # partial per call: nothing but the CPU is spent here (issue 26).
        perform = self._perform
        try:
            op = next(protocol)
            while True:
                op = protocol.send(perform(at, op))
        except StopIteration as stop:
            value: T = stop.value
            return value

    def _perform(self, at: tuple[str, str], op: Op) -> Reply:
        with self._lock:
            current = self._records.get(at)
            if type(op) is CreateOrGet:
                if current is not None:
                    return Found(current)
                self._records[at] = op.record
                return _STORED
            if type(op) is Replace:
                if current is None or not (current is op.expected or current == op.expected):
                    return Found(current)
                self._records[at] = op.record
                return _STORED
            return Found(current)


class AsyncMemoryDedupStore:
    """The in-memory store behind the :class:`~.base.AsyncDedupStore` protocol (for tests and
    single-process use): nothing to await, so each call runs at once under the store's lock."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK, *, store: MemoryDedupStore | None = None):
        self.sync = store or MemoryDedupStore(clock)

    async def claim(
        self, namespace: str, key: str, fingerprint: str, *, lease: timedelta, ttl: timedelta
    ) -> Claim:
        return self.sync.claim(namespace, key, fingerprint, lease=lease, ttl=ttl)

    async def complete(
        self, namespace: str, key: str, claim: Claim, result: str | None, *, ttl: timedelta
    ) -> None:
        self.sync.complete(namespace, key, claim, result, ttl=ttl)

    async def release(self, namespace: str, key: str, claim: Claim) -> None:
        self.sync.release(namespace, key, claim)

    async def get(self, namespace: str, key: str) -> DedupRecord | None:
        return self.sync.get(namespace, key)
