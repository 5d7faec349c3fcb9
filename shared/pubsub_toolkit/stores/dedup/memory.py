"""In-memory dedup store: first-class for unit tests and single-process use (not shared)."""

from __future__ import annotations

import threading
from datetime import timedelta

from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.errors import StaleClaimError
from pubsub_toolkit.stores.dedup import rules
from pubsub_toolkit.stores.dedup.base import Claim, ClaimStatus, DedupRecord, RecordState


class MemoryDedupStore:
    """A dict behind one lock; the lock makes claim an atomic insert-if-absent."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self._records: dict[tuple[str, str], DedupRecord] = {}
        self._lock = threading.Lock()

    def claim(
        self, namespace: str, key: str, fingerprint: str, *, lease: timedelta, ttl: timedelta
    ) -> Claim:
        with self._lock:
            now = self._clock.now()
            existing = self._records.get((namespace, key))
            status = rules.evaluate_claim(existing, fingerprint, now)
            if status in (ClaimStatus.ACQUIRED, ClaimStatus.TAKEN_OVER):
                record = rules.pending_record(
                    namespace,
                    key,
                    fingerprint,
                    rules.next_token(existing),
                    now=now,
                    lease=lease,
                    ttl=ttl,
                )
                self._records[(namespace, key)] = record
                return Claim(status, record.token, record)
            assert existing is not None  # every other status means a live record exists
            return Claim(status, existing.token, existing)

    def complete(
        self, namespace: str, key: str, claim: Claim, result: str | None, *, ttl: timedelta
    ) -> None:
        with self._lock:
            current = self._records.get((namespace, key))
            mine = current is not None and current.token == claim.token
            if mine and current is not None and current.state is RecordState.DONE:
                return  # our own completion, retried after its answer was lost
            if (
                current is None
                or current.token != claim.token
                or current.state is not RecordState.PENDING
            ):
                raise StaleClaimError(f"claim {claim.token} on {namespace}/{key} is no longer held")
            self._records[(namespace, key)] = rules.done_record(
                current, result, now=self._clock.now(), ttl=ttl
            )

    def release(self, namespace: str, key: str, claim: Claim) -> None:
        with self._lock:
            current = self._records.get((namespace, key))
            held = current is not None and current.token == claim.token
            if held and current is not None and current.state is RecordState.PENDING:
                self._records[(namespace, key)] = rules.released_record(
                    current, now=self._clock.now()
                )

    def get(self, namespace: str, key: str) -> DedupRecord | None:
        with self._lock:
            record = self._records.get((namespace, key))
        if record is None or record.is_expired(self._clock.now()):
            return None
        return record


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
