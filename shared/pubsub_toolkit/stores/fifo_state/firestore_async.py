"""Firestore FIFO gate store for asyncio (``google.cloud.firestore.AsyncClient``): the same
documents as :class:`~pubsub_toolkit.stores.fifo_state.firestore.FirestoreFifoStore` (state
document with a fresh ``write_id`` per save, ``update_time`` as the CAS version, parked copies
in the ``parked`` subcollection), so sync and async consumers share one store.

The transactional mode (``commit_with``) is sync-only for now. Fails closed.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import replace
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud.firestore_v1.base_query import FieldFilter

from pubsub_toolkit.message import Message
from pubsub_toolkit.stores._firestore_calls import TIMEOUT, bounded_async_retry, fail_closed_async
from pubsub_toolkit.stores.fifo_state.base import (
    GroupState,
    decode_message,
    encode_message,
    listed,
)
from pubsub_toolkit.stores.fifo_state.firestore import (
    _CONFLICT,
    DEFAULT_COLLECTION,
    EXPIRE_AT_FIELD,
    LISTED_FIELD,
    PARKED_COLLECTION,
    STATE_FIELD,
    WRITE_ID_FIELD,
    document_id,
    parked_id,
)

_RETRY = bounded_async_retry()


class AsyncFirestoreFifoStore:
    """Gate state and parked messages per ``(consumer, group)``, through an ``AsyncClient``."""

    def __init__(self, client: Any, *, collection: str = DEFAULT_COLLECTION) -> None:
        self._client = client
        self._collection = client.collection(collection)

    async def load(self, consumer: str, group: str) -> GroupState:
        snapshot = await fail_closed_async(
            self._ref(consumer, group).get(retry=_RETRY, timeout=TIMEOUT)
        )
        if not snapshot.exists:
            return GroupState()
        return GroupState.from_json(snapshot.get(STATE_FIELD), version=snapshot.update_time)

    async def save(
        self, consumer: str, group: str, state: GroupState, expected: GroupState
    ) -> GroupState | None:
        ref = self._ref(consumer, group)
        write_id = uuid.uuid4().hex
        document = {
            "consumer": consumer,
            "group": group,
            "last_processed": state.last_processed,
            STATE_FIELD: state.to_json(),
            WRITE_ID_FIELD: write_id,
            EXPIRE_AT_FIELD: state.expire_at,
            LISTED_FIELD: listed(state),
        }
        try:
            if expected.version is None:
                result = await fail_closed_async(
                    ref.create(document, retry=_RETRY, timeout=TIMEOUT)
                )
            else:
                option = self._client.write_option(last_update_time=expected.version)
                result = await fail_closed_async(
                    ref.update(document, option=option, retry=_RETRY, timeout=TIMEOUT)
                )
        except _CONFLICT:
            # The conflict may be our own first attempt, applied but unanswered (a retry).
            written = await fail_closed_async(
                ref.get(field_paths=[WRITE_ID_FIELD], retry=_RETRY, timeout=TIMEOUT)
            )
            if written.exists and written.get(WRITE_ID_FIELD) == write_id:
                return replace(state, version=written.update_time)
            return None
        return replace(state, version=result.update_time)

    async def park(self, consumer: str, group: str, seq: int, message: Message) -> None:
        document = {
            "consumer": consumer,
            "group": group,
            "seq": seq,
            "message": encode_message(message),
        }
        with contextlib.suppress(gexc.AlreadyExists):  # the first copy of a seq is kept
            await fail_closed_async(
                self._parked_ref(consumer, group, seq).create(
                    document, retry=_RETRY, timeout=TIMEOUT
                )
            )

    async def parked_message(self, consumer: str, group: str, seq: int) -> Message | None:
        snapshot = await fail_closed_async(
            self._parked_ref(consumer, group, seq).get(retry=_RETRY, timeout=TIMEOUT)
        )
        return decode_message(snapshot.get("message")) if snapshot.exists else None

    async def unpark(self, consumer: str, group: str, seq: int) -> None:
        await fail_closed_async(
            self._parked_ref(consumer, group, seq).delete(retry=_RETRY, timeout=TIMEOUT)
        )

    async def groups(self, consumer: str) -> list[str]:
        query = (  # as the sync store: the listed groups
            self._collection.where(filter=FieldFilter("consumer", "==", consumer))
            .where(filter=FieldFilter(LISTED_FIELD, "==", True))
            .select(["group"])
        )
        return sorted(
            [str(s.get("group")) async for s in query.stream(retry=_RETRY, timeout=TIMEOUT)]
        )

    def _ref(self, consumer: str, group: str) -> Any:
        return self._collection.document(document_id(consumer, group))

    def _parked_ref(self, consumer: str, group: str, seq: int) -> Any:
        return self._ref(consumer, group).collection(PARKED_COLLECTION).document(parked_id(seq))
