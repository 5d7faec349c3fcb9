"""The claim rules every backend applies, as pure functions (one truth, three stores)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from pubsub_toolkit.stores.dedup.base import ClaimStatus, DedupRecord, RecordState


def evaluate_claim(existing: DedupRecord | None, fingerprint: str, now: datetime) -> ClaimStatus:
    """Decide what a claim on a key holding ``existing`` means at ``now``."""
    if existing is None or existing.is_expired(now):
        return ClaimStatus.ACQUIRED
    if existing.fingerprint != fingerprint:
        return ClaimStatus.MISMATCH
    if existing.state is RecordState.DONE:
        return ClaimStatus.DONE
    if existing.lease_expired(now):
        return ClaimStatus.TAKEN_OVER
    return ClaimStatus.IN_PROGRESS


def next_token(existing: DedupRecord | None) -> int:
    """Fencing tokens only grow, even across an expired record, so a stale holder stays fenced."""
    return 1 if existing is None else existing.token + 1


def pending_record(
    namespace: str,
    key: str,
    fingerprint: str,
    token: int,
    *,
    now: datetime,
    lease: timedelta,
    ttl: timedelta,
) -> DedupRecord:
    """A fresh ``pending`` record held until ``now + lease``."""
    return DedupRecord(
        namespace=namespace,
        key=key,
        state=RecordState.PENDING,
        token=token,
        fingerprint=fingerprint,
        lease_until=now + lease,
        # Outlives the lease by a full TTL, so the record (and its fencing token) cannot vanish
        # while a stale holder might still try to complete.
        expire_at=now + lease + ttl,
    )


def done_record(
    pending: DedupRecord, result: str | None, *, now: datetime, ttl: timedelta
) -> DedupRecord:
    """The ``done`` record that replaces ``pending``; its TTL restarts at completion."""
    return replace(
        pending, state=RecordState.DONE, lease_until=None, result=result, expire_at=now + ttl
    )


def released_record(pending: DedupRecord, *, now: datetime) -> DedupRecord:
    """``pending`` with its lease ended, so the next claim takes over at once."""
    return replace(pending, lease_until=now)
