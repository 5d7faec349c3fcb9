"""Dead-letter operations: list what is there and why, and replay selected messages.

``list_dead_letters`` pulls without consuming (every message is handed straight back).
``replay`` re-publishes the selected ones to the origin topic - original data and attributes,
minus the ``error_*`` ones, plus ``replay_id`` - sorted by FIFO group and number, one at a time
and with the group as ordering key, so a group's messages go back in order; only then are they
acked on the dead-letter subscription.

Both read by pulling until the subscription has nothing more to give (one pull may return only
part of what is waiting), holding what they pulled until they are done. A reader running at the
same moment (another ``list``, the status page) may briefly hold some messages; ``replay``
then simply does not see those, and they stay on the dead-letter topic for the next run.

Ingress deduplicates a replay under ``dedup_key#replay:replay_id``: the original key is already
recorded (as dead-lettered), and without this the replay would be dropped as a duplicate. A
replay of a replay is itself deduplicated, and the final topic still carries the original
``dedup_key`` for consumers.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.dead_letter import DLQ_WRAPPED
from pubsub_toolkit.message import Message, OutboundMessage
from pubsub_toolkit.publishing import MessageSink


@dataclass(frozen=True)
class DeadLetter:
    """One message on the dead-letter topic, unwrapped, with why it is there."""

    message: Message  # the original, as it was before dead-lettering
    reason: str
    detail: str
    dead_lettered_at: datetime | None
    ack_id: str
    dead_letter_id: str

    @property
    def group(self) -> str | None:
        return self.message.attributes.get(attr.FIFO_GROUP)

    @property
    def seq(self) -> int | None:
        raw = self.message.attributes.get(attr.FIFO_SEQ)
        # isascii too: "²".isdigit() is true, and int() refuses it.
        return int(raw) if raw and raw.isascii() and raw.isdigit() else None

    @property
    def dedup_key(self) -> str | None:
        return self.message.attributes.get(attr.DEDUP_KEY)


def unwrap(received: Message) -> Message:
    """The original message inside a dead-letter copy (wrapped ones are JSON envelopes)."""
    attributes = dict(received.attributes)
    if attributes.get(DLQ_WRAPPED) == "json":
        doc = json.loads(received.data)
        return Message(
            base64.b64decode(doc["data_base64"]),
            doc["attributes"],
            message_id=doc.get("message_id", ""),
            ordering_key=doc.get("ordering_key", ""),
        )
    for name in (attr.ERROR_REASON, attr.ERROR_DETAIL, DLQ_WRAPPED):
        attributes.pop(name, None)
    return Message(received.data, attributes, message_id=received.message_id)


_EMPTY_PULLS_TO_STOP = 3


def _pull(subscriber: Any, subscription: str, max_messages: int) -> list[DeadLetter]:
    """Pull until nothing more comes or ``max_messages`` are held (none is acked here)."""
    letters: list[DeadLetter] = []
    seen: set[str] = set()
    empty_in_a_row = 0
    while len(letters) < max_messages and empty_in_a_row < _EMPTY_PULLS_TO_STOP:
        batch = _pull_once(subscriber, subscription, max_messages - len(letters))
        fresh = [d for d in batch if d.dead_letter_id not in seen]
        if not fresh:
            # Nothing new: release any second copy we got. Pub/Sub may answer a pull with
            # nothing while messages wait, so only a few empty answers in a row end the listing.
            _release(subscriber, subscription, [d.ack_id for d in batch])
            empty_in_a_row += 1
            continue
        empty_in_a_row = 0
        seen.update(d.dead_letter_id for d in fresh)
        letters += fresh
        kept = {d.ack_id for d in fresh}
        _release(subscriber, subscription, [d.ack_id for d in batch if d.ack_id not in kept])
    return letters


def _release(subscriber: Any, subscription: str, ack_ids: list[str]) -> None:
    if ack_ids:
        subscriber.modify_ack_deadline(
            subscription=subscription, ack_ids=ack_ids, ack_deadline_seconds=0
        )


def _pull_once(subscriber: Any, subscription: str, max_messages: int) -> list[DeadLetter]:
    response = subscriber.pull(
        subscription=subscription, max_messages=max_messages, return_immediately=True, timeout=10
    )
    letters = []
    for item in response.received_messages:
        m = item.message
        received = Message(m.data, dict(m.attributes), message_id=m.message_id)
        letters.append(
            DeadLetter(
                message=unwrap(received),
                reason=m.attributes.get(attr.ERROR_REASON, "unknown"),
                detail=m.attributes.get(attr.ERROR_DETAIL, ""),
                dead_lettered_at=m.publish_time,
                ack_id=item.ack_id,
                dead_letter_id=m.message_id,
            )
        )
    return letters


def list_dead_letters(subscriber: Any, subscription: str, *, limit: int = 1000) -> list[DeadLetter]:
    """Up to ``limit`` dead letters; none is consumed (each is released at once)."""
    letters = _pull(subscriber, subscription, limit)
    _release(subscriber, subscription, [d.ack_id for d in letters])
    return letters


def replay(
    subscriber: Any,
    subscription: str,
    sink: MessageSink,
    origin_topic: str,
    *,
    select: Callable[[DeadLetter], bool],
    limit: int = 1000,
) -> list[DeadLetter]:
    """Re-publish the selected dead letters to origin, in FIFO order; return what was replayed."""
    letters = _pull(subscriber, subscription, limit)
    chosen: list[DeadLetter] = []
    try:  # from here on, whatever fails (select may read a store), the pulled letters go back
        chosen = sorted(
            (d for d in letters if select(d)), key=lambda d: (d.group or "", d.seq or 0)
        )
        for letter in chosen:
            # The replay id is the dead-letter copy's own message id: a replay that crashed
            # before its ack below and runs again re-publishes under the same id, so ingress
            # (claiming dedup_key#replay:ID) lets exactly one copy through.
            attributes = {**letter.message.attributes, attr.REPLAY_ID: letter.dead_letter_id}
            # A group that broke the contract may not be a valid ordering key either.
            ordered = letter.reason != attr.REASON_INVALID_FIFO_GROUP
            key = (letter.group or "") if ordered else ""
            outbound = OutboundMessage(letter.message.data, attributes, ordering_key=key)
            sink.publish(origin_topic, outbound)  # waits for the publish: order is kept
        if chosen:
            subscriber.acknowledge(subscription=subscription, ack_ids=[d.ack_id for d in chosen])
    finally:
        replayed = {d.ack_id for d in chosen}
        _release(subscriber, subscription, [d.ack_id for d in letters if d.ack_id not in replayed])
    return chosen
