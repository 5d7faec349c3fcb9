"""Replaying dead letters (``dlq replay``): back to origin, in FIFO order, never forged.

``replay`` re-publishes the selected letters to the origin topic - original data and attributes,
minus the ``error_*`` ones, plus ``replay_id`` - sorted by FIFO group and number, one at a time
and with the group as ordering key, so a group's messages go back in order; only then are they
acked on the dead-letter subscription. A letter carrying ``fifo_filler`` is never replayed: it
stands for a FIFO number that carries no new message, and without its marker it would run its
data as a message of its own. Nor is an *unreadable* letter (see
:func:`~pubsub_toolkit_cli.dead_letters.listing.read_letter`): what it would replay is not known.
Both stay on the dead-letter topic, and ``on_kept`` hears of each. Letters another reader holds
at that moment are not seen and stay on the dead-letter topic for the next run.

Ingress deduplicates a replay under ``dedup_key#replay:replay_id``; a replay of a replay is
itself deduplicated, and the final topic still carries the original ``dedup_key`` for
consumers. Before it publishes a replay, ``replay`` *mints* its id in the dedup store ingress
reads, with the library's :func:`pubsub_toolkit.dead_letters.replay.mint` - the mark ingress
checks (a ``replay_id`` nobody minted is dead-lettered ``forged_replay_id``). A letter whose
original had no ``dedup_key`` (ingress used its message id) is replayed with that id as its
``dedup_key``, so the mint, ingress's claim and a second run of the same replay agree on it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.dead_letters.replay import is_minted, mint
from pubsub_toolkit.errors import ToolkitError
from pubsub_toolkit.message import OutboundMessage
from pubsub_toolkit.producer.sink import MessageSink
from pubsub_toolkit.stores.dedup.base import DedupStore
from pubsub_toolkit_cli.dead_letters.listing import (
    REASON_FORWARDED,
    DeadLetter,
    pull_letters,
    release_letters,
)

logger = logging.getLogger("pubsub_toolkit.dlq")


def replay(
    subscriber: Any,
    subscription: str,
    sink: MessageSink,
    origin_topic: str,
    *,
    store: DedupStore,
    select: Callable[[DeadLetter], bool],
    limit: int = 1000,
    on_kept: Callable[[DeadLetter, str], None] | None = None,
) -> list[DeadLetter]:
    """Re-publish the selected dead letters to origin, in FIFO order; return what was replayed.

    ``store`` is the dedup store ingress uses: each replay id is minted there before its
    message is published. Raises ToolkitError if a mint cannot be confirmed; whatever fails,
    every letter not yet acked goes back to the dead-letter subscription at once. A selected
    letter that is never replayed (a filler, an unreadable letter) is passed to ``on_kept``
    with why, and logged.
    """
    letters = pull_letters(subscriber, subscription, limit)
    acked: set[str] = set()
    try:  # from here on, whatever fails (select may read a store), the pulled letters go back
        replayable = []
        for letter in letters:
            why = never_replayed(letter)
            if not why:
                replayable.append(letter)
                continue
            logger.warning(
                "kept dead letter %s on the dead-letter topic: %s", letter.dead_letter_id, why
            )
            if on_kept is not None and select(letter):
                on_kept(letter, why)
        chosen = sorted(
            (d for d in replayable if select(d)),
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
        release_letters(
            subscriber, subscription, [d.ack_id for d in letters if d.ack_id not in acked]
        )
    return chosen


def never_replayed(letter: DeadLetter) -> str:
    """Why ``letter`` is never replayed ("" when it may be)."""
    if letter.reason == REASON_FORWARDED and letter.dedup_key is None:
        # Pub/Sub gives a forwarded copy a new message id and keeps no trace of the old one,
        # which was the message's key at ingress: a replay would be a new message to every
        # store, and run again if the original did run (its ack was lost, say).
        return (
            "Pub/Sub forwarded it without a dedup_key, so the key ingress gave it (its original "
            "message id) is lost: a replay could run it a second time. Publish it again by hand "
            "once you know it never ran"
        )
    if letter.unreadable:
        return f"it is unreadable ({letter.unreadable}); read it with gcloud and handle it by hand"
    if letter.is_filler:
        return (
            f"it is a FIFO filler ({letter.message.attributes[attr.FIFO_FILLER][:80]}) for "
            f"{letter.group} #{letter.seq} and carries no new message"
        )
    return ""


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
