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

from google.api_core import exceptions as gexc

from pubsub_toolkit.message import Message
from pubsub_toolkit.stores._firestore_calls import TIMEOUT, bounded_async_retry, fail_closed_async
from pubsub_toolkit.stores.fifo_state.base import GroupState, decode_message
from pubsub_toolkit.stores.fifo_state.firestore import (
    _CONFLICT,
    STATE_FIELD,
    WRITE_ID_FIELD,
    DocumentLayout,
    parked_document,
    state_fields,
)

_RETRY = bounded_async_retry()


class AsyncFirestoreFifoStore(DocumentLayout):
    """Gate state and parked messages per ``(consumer, group)``, through an ``AsyncClient``."""

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
        document = {"consumer": consumer, "group": group, **state_fields(state, write_id)}
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
        document = parked_document(consumer, group, seq, message)
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
        query = self._listed(consumer)  # as the sync store
        return sorted(
            [str(s.get("group")) async for s in query.stream(retry=_RETRY, timeout=TIMEOUT)]
        )
