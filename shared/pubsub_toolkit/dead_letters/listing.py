"""Listing the dead-letter topic: what is there and why, without consuming it.

``list_dead_letters`` pulls until the subscription has nothing more to give (one pull may return
only part of what is waiting), holding what it pulled until it is done, then hands every message
straight back. A reader running at the same moment (another ``list``, the status page, a
``replay``) may briefly hold some messages; each simply does not see those.

:func:`pull_letters` and :func:`release_letters` are the two halves, shared with
:mod:`~pubsub_toolkit.dead_letters.replay`.
"""

from __future__ import annotations

import base64
import json
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.dead_letters.send import DLQ_WRAPPED
from pubsub_toolkit.errors import ContractViolation
from pubsub_toolkit.message import Message

logger = logging.getLogger("pubsub_toolkit.dlq")


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
        """The FIFO number, or None when it is absent or not canonical (see the contract)."""
        raw = self.message.attributes.get(attr.FIFO_SEQ)
        if raw is None:
            return None
        try:
            return attr.parse_fifo_seq(raw)  # the consumer's reading: "01" is no number
        except ContractViolation:
            return None

    @property
    def dedup_key(self) -> str | None:
        return self.message.attributes.get(attr.DEDUP_KEY)

    @property
    def is_filler(self) -> bool:
        """True for a FIFO filler: a number that carries no new message (never replayed)."""
        return attr.FIFO_FILLER in self.message.attributes

    @property
    def replay_key(self) -> str:
        """The dedup key a replay of this letter carries (and its replay id is minted for).

        The original's ``dedup_key``; without one, the key ingress gave the original - its
        message id, which the dead-letter copy keeps as ``origin_message_id``. (Left to
        ingress, a replay's key would be the *replay's* new message id: a different key at
        every run, so a replay re-run after a crash would pass twice.)
        """
        if self.dedup_key is not None:
            return self.dedup_key  # even a blank one: its replay is refused again, not mended
        return (
            self.message.attributes.get(attr.ORIGIN_MESSAGE_ID)
            or self.message.message_id
            or self.dead_letter_id
        )


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


def pull_letters(subscriber: Any, subscription: str, max_messages: int) -> list[DeadLetter]:
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
            release_letters(subscriber, subscription, [d.ack_id for d in batch])
            empty_in_a_row += 1
            continue
        empty_in_a_row = 0
        seen.update(d.dead_letter_id for d in fresh)
        letters += fresh
        kept = {d.ack_id for d in fresh}
        release_letters(subscriber, subscription, [d.ack_id for d in batch if d.ack_id not in kept])
    return letters


def release_letters(subscriber: Any, subscription: str, ack_ids: list[str]) -> None:
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
    letters = pull_letters(subscriber, subscription, limit)
    release_letters(subscriber, subscription, [d.ack_id for d in letters])
    return letters
