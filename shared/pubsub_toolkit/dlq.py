"""Dead-letter operations: list what is there and why, and replay selected messages.

``list_dead_letters`` pulls without consuming (every message is handed straight back).
``replay`` re-publishes the selected ones to the origin topic - original data and attributes,
minus the ``error_*`` ones, plus ``replay_id`` - sorted by FIFO group and number, one at a time
and with the group as ordering key, so a group's messages go back in order; only then are they
acked on the dead-letter subscription. A letter carrying ``fifo_filler`` is never replayed: it
stands for a FIFO number that carries no new message, and without its marker it would run its
data as a message of its own.

Both read by pulling until the subscription has nothing more to give (one pull may return only
part of what is waiting), holding what they pulled until they are done. A reader running at the
same moment (another ``list``, the status page) may briefly hold some messages; ``replay``
then simply does not see those, and they stay on the dead-letter topic for the next run.

Ingress deduplicates a replay under ``dedup_key#replay:replay_id``: the original key is already
recorded (as dead-lettered), and without this the replay would be dropped as a duplicate. A
replay of a replay is itself deduplicated, and the final topic still carries the original
``dedup_key`` for consumers.

Replay ids are unforgeable: before it publishes a replay, ``replay`` *mints* its id in the dedup
store ingress reads (:func:`pubsub_toolkit.replays.mint`, naming the dedup key), and ingress
dead-letters a ``replay_id`` it finds no mint for (``forged_replay_id``) - a producer setting
``replay_id`` itself cannot push a delivered key through ingress dedup again. A letter whose
original had no ``dedup_key`` (ingress used its message id) is replayed with that id as its
``dedup_key``, so the mint, ingress's claim and a second run of the same replay agree on it.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.dead_letter import DLQ_WRAPPED
from pubsub_toolkit.dedup.store import DedupStore
from pubsub_toolkit.errors import ContractViolation, ToolkitError
from pubsub_toolkit.message import Message, OutboundMessage
from pubsub_toolkit.publishing import MessageSink
from pubsub_toolkit.replays import is_minted, mint

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
    store: DedupStore,
    select: Callable[[DeadLetter], bool],
    limit: int = 1000,
) -> list[DeadLetter]:
    """Re-publish the selected dead letters to origin, in FIFO order; return what was replayed.

    ``store`` is the dedup store ingress uses: each replay id is minted there before its
    message is published. Raises ToolkitError if a mint cannot be confirmed; whatever fails,
    every letter not yet acked goes back to the dead-letter subscription at once.
    """
    letters = _pull(subscriber, subscription, limit)
    acked: set[str] = set()
    try:  # from here on, whatever fails (select may read a store), the pulled letters go back
        fillers = [d for d in letters if d.is_filler]
        for letter in fillers:
            logger.warning(
                "kept dead letter %s on the dead-letter topic: it is a FIFO filler (%s) for "
                "%s #%s and carries no new message",
                letter.dead_letter_id,
                letter.message.attributes[attr.FIFO_FILLER][:80],
                letter.group,
                letter.seq,
            )
        chosen = sorted(
            (d for d in letters if not d.is_filler and select(d)),
            key=lambda d: (d.group or "", d.seq or 0),
        )
        for letter in chosen:
            _publish_replay(letter, sink, origin_topic, store)
        if chosen:
            subscriber.acknowledge(subscription=subscription, ack_ids=[d.ack_id for d in chosen])
            acked = {d.ack_id for d in chosen}
    finally:
        # A replay that failed half-way also hands back what it published: the next run
        # re-publishes those under the same replay ids, and ingress lets one copy of each through.
        _release(subscriber, subscription, [d.ack_id for d in letters if d.ack_id not in acked])
    return chosen


def _publish_replay(letter: DeadLetter, sink: MessageSink, topic: str, store: DedupStore) -> None:
    """Mint ``letter``'s replay id, then publish the replay (and wait: order is kept)."""
    # The replay id is the dead-letter copy's own message id: a replay that crashed before its
    # ack and runs again re-publishes under the same id (and mints it again: idempotent), so
    # ingress (claiming dedup_key#replay:ID) lets exactly one copy through.
    replay_id, key = letter.dead_letter_id, letter.replay_key
    mint(store, replay_id, key)
    if not is_minted(store, replay_id, key):
        # A run that crashed mid-mint holds the record for its short lease; publishing now
        # would only see the replay dead-lettered as forged.
        raise ToolkitError(
            f"could not mint replay id {replay_id!r} for dedup_key {key!r} (another replay "
            "of it may be running, or one crashed within the last minute); try again shortly"
        )
    attributes = {**letter.message.attributes, attr.DEDUP_KEY: key, attr.REPLAY_ID: replay_id}
    # A group that broke the contract may not be a valid ordering key either.
    ordered = letter.reason != attr.REASON_INVALID_FIFO_GROUP
    ordering_key = (letter.group or "") if ordered else ""
    sink.publish(topic, OutboundMessage(letter.message.data, attributes, ordering_key))
