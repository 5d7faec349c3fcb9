"""The dedup store protocol and the values it trades in.

A store records, per ``(namespace, key)``, a two-phase record:

* ``pending`` - someone claimed the key and is running the effect. The claim has a *lease*
  (``lease_until``) and a *fencing token* that grows by one at every takeover.
* ``done`` - the effect happened; the record keeps its result for duplicates to return.

Every record carries ``expire_at``; reads treat an expired record as absent (Firestore's TTL
deletes up to a day late, the emulator never). Claims are atomic insert-if-absent operations,
never check-then-set: Firestore ``create()``, Redis ``SET NX PX``, a lock in memory.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol


class RecordState(enum.StrEnum):
    """The two phases of a dedup record."""

    PENDING = "pending"
    DONE = "done"


class ClaimStatus(enum.StrEnum):
    """What a claim attempt found."""

    ACQUIRED = "acquired"  # the key was free (or expired): run the effect
    TAKEN_OVER = "taken_over"  # a pending claim's lease had expired: run the effect
    IN_PROGRESS = "in_progress"  # a live pending claim elsewhere: retry later
    DONE = "done"  # a duplicate: the effect already happened
    MISMATCH = "mismatch"  # same key, different content fingerprint


@dataclass(frozen=True)
class DedupRecord:
    """One stored record, as read back."""

    namespace: str
    key: str
    state: RecordState
    token: int
    fingerprint: str
    lease_until: datetime | None
    expire_at: datetime
    result: str | None = None

    def is_expired(self, now: datetime) -> bool:
        return now >= self.expire_at

    def lease_expired(self, now: datetime) -> bool:
        return self.lease_until is not None and now >= self.lease_until


@dataclass(frozen=True)
class Claim:
    """The outcome of :meth:`DedupStore.claim`.

    ``token`` is the fencing token to pass to ``complete``/``release`` when the status lets the
    caller run the effect; ``record`` is what the store holds now (for duplicates: its result).
    ``version`` is backend-private state that lets ``complete`` skip a read (Redis: the raw
    record written; Firestore: its update_time); callers just hand it back.
    """

    status: ClaimStatus
    token: int
    record: DedupRecord | None = None
    version: object = None

    @property
    def owns_key(self) -> bool:
        """True when the caller holds the claim and must run the effect."""
        return self.status in (ClaimStatus.ACQUIRED, ClaimStatus.TAKEN_OVER)


class DedupStore(Protocol):
    """Atomic two-phase dedup records. One implementation per backend module."""

    def claim(
        self,
        namespace: str,
        key: str,
        fingerprint: str,
        *,
        lease: timedelta,
        ttl: timedelta,
    ) -> Claim:
        """Atomically claim ``key`` or report who has it. Never blocks on another holder."""
        ...

    def complete(
        self, namespace: str, key: str, claim: Claim, result: str | None, *, ttl: timedelta
    ) -> None:
        """Mark the claim ``done`` with ``result``.

        Raises :class:`~pubsub_toolkit.errors.StaleClaimError` if the claim's token is no
        longer current (the lease expired and another worker took over).
        """
        ...

    def release(self, namespace: str, key: str, claim: Claim) -> None:
        """Give up a claim after a failed effect so a redelivery can claim at once.

        The record stays (with its lease ended) so that fencing tokens keep growing; a stale
        token is ignored.
        """
        ...

    def get(self, namespace: str, key: str) -> DedupRecord | None:
        """The current record, or None when absent or expired."""
        ...


class AsyncDedupStore(Protocol):
    """:class:`DedupStore` for asyncio: the same operations and guarantees, awaited
    (``redis.asyncio``, Firestore's ``AsyncClient``, or memory for tests)."""

    async def claim(
        self,
        namespace: str,
        key: str,
        fingerprint: str,
        *,
        lease: timedelta,
        ttl: timedelta,
    ) -> Claim: ...

    async def complete(
        self, namespace: str, key: str, claim: Claim, result: str | None, *, ttl: timedelta
    ) -> None: ...

    async def release(self, namespace: str, key: str, claim: Claim) -> None: ...

    async def get(self, namespace: str, key: str) -> DedupRecord | None: ...
