"""Dead-letter operations: list what is there and why, and replay selected messages.

``list_dead_letters`` pulls without consuming (every message is handed straight back).
``replay`` re-publishes the selected ones to the origin topic - original data and attributes,
minus the ``error_*`` ones, plus ``replay_id`` - sorted by FIFO group and number so a group's
messages go back in order; only then are they acked on the dead-letter subscription.

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
        return int(raw) if raw and raw.isdigit() else None

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


def _pull(subscriber: Any, subscription: str, max_messages: int) -> list[DeadLetter]:
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
    if letters:
        subscriber.modify_ack_deadline(
            subscription=subscription, ack_ids=[d.ack_id for d in letters], ack_deadline_seconds=0
        )
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
    chosen = sorted((d for d in letters if select(d)), key=lambda d: (d.group or "", d.seq or 0))
    for letter in chosen:
        attributes = {**letter.message.attributes, attr.REPLAY_ID: letter.dead_letter_id}
        sink.publish(origin_topic, OutboundMessage(letter.message.data, attributes))
    if chosen:
        subscriber.acknowledge(subscription=subscription, ack_ids=[d.ack_id for d in chosen])
    rest = [d.ack_id for d in letters if d not in chosen]
    if rest:
        subscriber.modify_ack_deadline(
            subscription=subscription, ack_ids=rest, ack_deadline_seconds=0
        )
    return chosen
