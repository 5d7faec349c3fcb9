"""Firestore dedup store for asyncio (``google.cloud.firestore.AsyncClient``): the same
documents as :class:`~pubsub_toolkit.stores.dedup.firestore.FirestoreDedupStore` (collection,
ids, fields), so sync and async workers share one store.

``create()`` claims a new key (AlreadyExists: someone has it); a takeover and every later write
carry an ``update_time`` precondition - one atomic write, exactly one winner, no transaction.
``complete`` is idempotent per claim as in the sync store: a precondition failure against our
own applied first attempt is found by reading the record (done under our token = success).
Every decision is :mod:`pubsub_toolkit.stores.dedup.rules`'. Fails closed (StoreUnavailableError).
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

from google.api_core import exceptions as gexc

from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.errors import StaleClaimError
from pubsub_toolkit.stores._firestore_calls import TIMEOUT, bounded_async_retry, fail_closed_async
from pubsub_toolkit.stores.dedup import rules
from pubsub_toolkit.stores.dedup.base import Claim, ClaimStatus, DedupRecord, RecordState
from pubsub_toolkit.stores.dedup.firestore import (
    DEFAULT_COLLECTION,
    DONE_FIELDS,
    RELEASED_FIELDS,
    changed_fields,
    document_id,
    from_document,
    to_document,
)

_RETRY = bounded_async_retry()


class AsyncFirestoreDedupStore:
    """Two-phase dedup records in a Firestore collection, through an ``AsyncClient``."""

    def __init__(
        self, client: Any, *, collection: str = DEFAULT_COLLECTION, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self._client = client
        self._collection = client.collection(collection)
        self._clock = clock

    async def claim(
        self, namespace: str, key: str, fingerprint: str, *, lease: timedelta, ttl: timedelta
    ) -> Claim:
        ref = self._collection.document(document_id(namespace, key))
        while True:
            now = self._clock.now()
            fresh = rules.pending_record(
                namespace, key, fingerprint, 1, now=now, lease=lease, ttl=ttl
            )
            try:
                written = await fail_closed_async(
                    ref.create(to_document(fresh), retry=_RETRY, timeout=TIMEOUT)
                )
                return Claim(ClaimStatus.ACQUIRED, 1, fresh, version=written.update_time)
            except gexc.AlreadyExists:
                pass
            snapshot = await fail_closed_async(ref.get(retry=_RETRY, timeout=TIMEOUT))
            if not snapshot.exists:
                continue  # deleted (TTL) between create and get: try to create again
            existing = from_document(snapshot.to_dict() or {})
            status = rules.evaluate_claim(existing, fingerprint, now)
            if status not in (ClaimStatus.ACQUIRED, ClaimStatus.TAKEN_OVER):
                return Claim(status, existing.token, existing)
            record = rules.pending_record(
                namespace,
                key,
                fingerprint,
                rules.next_token(existing),
                now=now,
                lease=lease,
                ttl=ttl,
            )
            try:
                written = await self._update(ref, to_document(record), snapshot.update_time)
                return Claim(status, record.token, record, version=written.update_time)
            except gexc.FailedPrecondition:
                continue  # another contender won the takeover: look again

    async def complete(
        self, namespace: str, key: str, claim: Claim, result: str | None, *, ttl: timedelta
    ) -> None:
        if claim.record is None:
            raise StaleClaimError(f"claim on {namespace}/{key} carries no record")
        done = rules.done_record(claim.record, result, now=self._clock.now(), ttl=ttl)
        await self._replace_if_token(
            namespace, key, claim, changed_fields(done, DONE_FIELDS), done_is_ours=True
        )

    async def release(self, namespace: str, key: str, claim: Claim) -> None:
        if claim.record is None:
            return
        released = rules.released_record(claim.record, now=self._clock.now())
        with contextlib.suppress(StaleClaimError):  # someone else holds it: nothing to release
            await self._replace_if_token(
                namespace,
                key,
                claim,
                changed_fields(released, RELEASED_FIELDS),
                done_is_ours=False,
            )

    async def get(self, namespace: str, key: str) -> DedupRecord | None:
        ref = self._collection.document(document_id(namespace, key))
        snapshot = await fail_closed_async(ref.get(retry=_RETRY, timeout=TIMEOUT))
        if not snapshot.exists:
            return None
        record = from_document(snapshot.to_dict() or {})
        return None if record.is_expired(self._clock.now()) else record

    async def _replace_if_token(
        self,
        namespace: str,
        key: str,
        claim: Claim,
        document: dict[str, Any],
        *,
        done_is_ours: bool,
    ) -> None:
        """Write ``document`` while the record is ``pending`` under ``claim.token`` (with
        ``done_is_ours``, a record already done under our token is our own first attempt)."""
        ref = self._collection.document(document_id(namespace, key))
        if claim.version is not None:
            try:  # nothing changed since our own claim write: no read needed
                await self._update(ref, document, claim.version)
                return
            except gexc.FailedPrecondition:
                pass
        while True:
            snapshot = await fail_closed_async(ref.get(retry=_RETRY, timeout=TIMEOUT))
            current = from_document(snapshot.to_dict() or {}) if snapshot.exists else None
            if current is None or current.token != claim.token:
                raise StaleClaimError(f"claim {claim.token} on {namespace}/{key} is no longer held")
            if current.state is RecordState.DONE:
                if done_is_ours:
                    return
                raise StaleClaimError(f"claim {claim.token} on {namespace}/{key} is already done")
            try:
                await self._update(ref, document, snapshot.update_time)
                return
            except gexc.FailedPrecondition:
                continue

    async def _update(self, ref: Any, document: dict[str, Any], last_update_time: Any) -> Any:
        option = self._client.write_option(last_update_time=last_update_time)
        return await fail_closed_async(
            ref.update(document, option=option, retry=_RETRY, timeout=TIMEOUT)
        )
