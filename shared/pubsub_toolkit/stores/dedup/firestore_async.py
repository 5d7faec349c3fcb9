"""Firestore dedup store for asyncio (``google.cloud.firestore.AsyncClient``): the same
documents as :class:`~pubsub_toolkit.stores.dedup.firestore.FirestoreDedupStore` (collection,
ids, fields), so sync and async workers share one store.

The claim loop is :mod:`.claims`' (one for every backend, sync and async); this module performs
its primitives as the sync store does: create-or-get is ``create()`` and, on AlreadyExists, a
read; the compare-and-set an update with an ``update_time`` precondition - one atomic write,
exactly one winner, no transaction. Fails closed (StoreUnavailableError).
"""

from __future__ import annotations

from functools import partial
from typing import Any, TypeVar

from google.api_core import exceptions as gexc

from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.stores._firestore_calls import TIMEOUT, bounded_async_retry, fail_closed_async
from pubsub_toolkit.stores.dedup import claims
from pubsub_toolkit.stores.dedup.claims import CreateOrGet, Op, Replace, Reply, Stored
from pubsub_toolkit.stores.dedup.firestore import (
    DEFAULT_COLLECTION,
    changed_fields,
    document_id,
    found,
    to_document,
)

_RETRY = bounded_async_retry()
T = TypeVar("T")


class AsyncFirestoreDedupStore(claims.AsyncClaimLoop[Any]):
    """Two-phase dedup records in a Firestore collection, through an ``AsyncClient``."""

    def __init__(
        self, client: Any, *, collection: str = DEFAULT_COLLECTION, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self._client = client
        self._collection = client.collection(collection)
        self._clock = clock

    def _key(self, namespace: str, key: str) -> Any:
        return self._collection.document(document_id(namespace, key))

    async def _drive(self, protocol: claims.Protocol[T], ref: Any) -> T:
        return await claims.run_async(protocol, partial(self._perform, ref))

    async def _perform(self, ref: Any, op: Op) -> Reply:
        """One primitive of the claim loop on ``ref``, as the sync store performs it."""
        if type(op) is CreateOrGet:
            try:
                written = await fail_closed_async(
                    ref.create(to_document(op.record), retry=_RETRY, timeout=TIMEOUT)
                )
                return Stored(written.update_time)
            except gexc.AlreadyExists:
                return found(await fail_closed_async(ref.get(retry=_RETRY, timeout=TIMEOUT)))
        if type(op) is Replace:
            if op.version is None:
                return None  # no update_time to compare with: the loop reads first
            document = changed_fields(op.record, op.fields)
            option = self._client.write_option(last_update_time=op.version)
            try:
                written = await fail_closed_async(
                    ref.update(document, option=option, retry=_RETRY, timeout=TIMEOUT)
                )
            except gexc.FailedPrecondition:
                return None  # the document moved on: the loop reads it and decides again
            return Stored(written.update_time)
        return found(await fail_closed_async(ref.get(retry=_RETRY, timeout=TIMEOUT)))
