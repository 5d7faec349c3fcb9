"""Cancelling a delayed message before its due time.

``cancel`` writes a *tombstone* (a ``done`` record in namespace ``cancelled``) and deletes the
first task. The tombstone is what makes cancellation reliable: a task that still fires (already
dispatched, or a later hop of a long delay) finds it and publishes nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from pubsub_toolkit.dedup.store import ClaimStatus, DedupStore, RecordState
from pubsub_toolkit.delay.scheduler import MAX_DELAY, CloudTasksScheduler

logger = logging.getLogger(__name__)

CANCELLED_NAMESPACE = "cancelled"
RELAY_NAMESPACE = "relay"
# A tombstone must outlive the longest possible delay.
TOMBSTONE_TTL = MAX_DELAY + timedelta(days=1)


@dataclass(frozen=True)
class CancelResult:
    """What cancelling found: whether a task was deleted, and whether it was too late."""

    dedup_key: str
    task_deleted: bool
    already_delivered: bool


def cancel(dedup_key: str, *, store: DedupStore, scheduler: CloudTasksScheduler) -> CancelResult:
    """Cancel the delayed message ``dedup_key``; idempotent."""
    claim = store.claim(
        CANCELLED_NAMESPACE, dedup_key, "cancelled", lease=timedelta(minutes=1), ttl=TOMBSTONE_TTL
    )
    if claim.owns_key:
        store.complete(CANCELLED_NAMESPACE, dedup_key, claim, "cancelled", ttl=TOMBSTONE_TTL)
    deleted = scheduler.delete(dedup_key)
    released = store.get(RELAY_NAMESPACE, dedup_key)
    delivered = released is not None and released.state is RecordState.DONE
    logger.info(
        "cancelled %s: task deleted=%s, already delivered=%s (tombstone %s)",
        dedup_key,
        deleted,
        delivered,
        "written" if claim.owns_key else "existed" if claim.status is ClaimStatus.DONE else "busy",
    )
    return CancelResult(dedup_key, task_deleted=deleted, already_delivered=delivered)


def is_cancelled(store: DedupStore, dedup_key: str) -> bool:
    """True when a tombstone for ``dedup_key`` exists."""
    return store.get(CANCELLED_NAMESPACE, dedup_key) is not None
