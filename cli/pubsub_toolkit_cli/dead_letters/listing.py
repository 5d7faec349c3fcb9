"""Listing the dead-letter topic: what is there and why, without consuming it.

``list_dead_letters`` pulls until the subscription has nothing more to give (one pull may return
only part of what is waiting), holding what it pulled until it is done, then hands every message
straight back. A reader running at the same moment (another ``list``, the status page, a
``replay``) may briefly hold some messages; each simply does not see those.

:func:`pull_letters` and :func:`release_letters` are the two halves, shared with
:mod:`~pubsub_toolkit_cli.dead_letters.replay` (``dlq replay``).

A letter's description of itself is trusted only where the toolkit wrote it
(:func:`read_letter`): one Pub/Sub's dead-letter policy forwarded (``CloudPubSubDeadLetter*``)
is the message as it was, its ``error_*``/``dlq_*`` the producer's; a wrapped copy is unwrapped
only if it has the exact shape :func:`~pubsub_toolkit.dead_letters.send.dead_letter_copy`
writes. Any other letter is listed *unreadable*, with why, and never replayed; it stays on the
topic, and a listing never stops at it.
"""

from __future__ import annotations

import base64
import json
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.dead_letters.send import DLQ_WRAPPED, WRAPPED_KEYS
from pubsub_toolkit.errors import ContractViolation
from pubsub_toolkit.message import Message

logger = logging.getLogger("pubsub_toolkit.dlq")

REASON_UNKNOWN = "unknown"  # a letter no part of the toolkit wrote a reason on
REASON_FORWARDED = "max_delivery_attempts"  # Pub/Sub's dead-letter policy forwarded it
# What the toolkit's wrapped copy carries besides trace context (send.dead_letter_copy).
_WRAP_ATTRIBUTES = frozenset({attr.ERROR_REASON, attr.ERROR_DETAIL, attr.ORIGIN_MESSAGE_ID})
_SOURCE = attr.PUBSUB_DEAD_LETTER_PREFIX + "SourceSubscription"
_ATTEMPTS = attr.PUBSUB_DEAD_LETTER_PREFIX + "SourceDeliveryCount"


@dataclass(frozen=True)
class DeadLetter:
    """One message on the dead-letter topic, unwrapped, with why it is there."""

    message: Message  # the original, as it was before dead-lettering
    reason: str
    detail: str
    dead_lettered_at: datetime | None
    ack_id: str
    dead_letter_id: str
    # Why the letter cannot be read as a dead letter ("" when it can): ``message`` is then the
    # letter as it came, listed but never replayed.
    unreadable: str = ""

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


@dataclass(frozen=True)
class Reading:
    """What a letter says, as far as it can be trusted (see :func:`read_letter`)."""

    message: Message  # the original
    reason: str
    detail: str
    unreadable: str = ""


def read_letter(received: Message) -> Reading:
    """The original message inside a dead-letter copy, and why it is there; never raises.

    A copy the toolkit wrote carries the original's attributes plus ``error_reason`` and
    ``error_detail``, or wraps the whole original as JSON (``dlq_wrapped=json``, only the
    toolkit's attributes beside it). A letter Pub/Sub forwarded is the message as it was.
    Anything else claiming to be wrapped is *unreadable*: listed with why, never unwrapped.
    """
    attributes = dict(received.attributes)
    if any(k.startswith(attr.PUBSUB_DEAD_LETTER_PREFIX) for k in attributes):
        # Forwarded by a subscription's dead-letter policy: every other attribute is the
        # message's own (a producer's error_reason or dlq_wrapped included), so none describes it.
        detail = (
            f"forwarded by Pub/Sub from subscription {attributes.get(_SOURCE, '?')} after "
            f"{attributes.get(_ATTEMPTS, '?')} delivery attempts"
        )
        forwarded = attr.PUBSUB_DEAD_LETTER_PREFIX
        own = {k: v for k, v in attributes.items() if not k.startswith(forwarded)}
        return Reading(
            Message(received.data, own, message_id=received.message_id), REASON_FORWARDED, detail
        )
    reason = attributes.pop(attr.ERROR_REASON, REASON_UNKNOWN)
    detail = attributes.pop(attr.ERROR_DETAIL, "")
    if DLQ_WRAPPED not in attributes:
        return Reading(
            Message(received.data, attributes, message_id=received.message_id), reason, detail
        )
    try:
        return Reading(_unwrapped(received), reason, detail)
    except Exception as exc:  # any shape: the caller logs it, lists it, and goes on
        return Reading(
            received, reason, detail, unreadable=f"not the toolkit's wrapping: {str(exc)[:200]}"
        )


def _unwrapped(received: Message) -> Message:
    """The original inside a wrapped copy; ValueError unless the copy has the exact shape the
    toolkit writes (a letter written before producers' ``dlq_*`` were refused may not)."""
    attributes = received.attributes
    if attributes[DLQ_WRAPPED] != "json":
        raise ValueError(f"{DLQ_WRAPPED} is {attributes[DLQ_WRAPPED][:40]!r}, not 'json'")
    extra = sorted(
        k for k in attributes.keys() - _WRAP_ATTRIBUTES - {DLQ_WRAPPED} if not _is_trace(k)
    )
    if extra:
        raise ValueError(f"a wrapped copy carries no other attributes, this one {extra[:5]}")
    doc = json.loads(received.data)
    if not isinstance(doc, dict) or doc.keys() != WRAPPED_KEYS:
        raise ValueError(f"the data is not a JSON object with keys {sorted(WRAPPED_KEYS)}")
    inner = doc["attributes"]
    if not isinstance(inner, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in inner.items()
    ):
        raise ValueError("its attributes are not a map of strings")
    message_id, ordering_key = doc["message_id"], doc["ordering_key"]
    if not isinstance(message_id, str) or not isinstance(ordering_key, str):
        raise ValueError("message_id and ordering_key must be strings")
    if not isinstance(doc["data_base64"], str):
        raise ValueError("data_base64 must be a string")
    data = base64.b64decode(doc["data_base64"], validate=True)
    return Message(data, inner, message_id=message_id, ordering_key=ordering_key)


def _is_trace(name: str) -> bool:
    return name.startswith("googclient_")  # the trace context a forwarding sink adds


_EMPTY_PULLS_TO_STOP = 3


def pull_letters(subscriber: Any, subscription: str, max_messages: int) -> list[DeadLetter]:
    """Pull until nothing more comes or ``max_messages`` are held (none is acked here)."""
    letters: list[DeadLetter] = []
    seen: set[str] = set()
    empty_in_a_row = 0
    try:
        while len(letters) < max_messages and empty_in_a_row < _EMPTY_PULLS_TO_STOP:
            batch = _pull_once(subscriber, subscription, max_messages - len(letters))
            fresh = [d for d in batch if d.dead_letter_id not in seen]
            if not fresh:
                # Nothing new: release any second copy we got. Pub/Sub may answer a pull with
                # nothing while messages wait, so only a few empty answers in a row end it.
                release_letters(subscriber, subscription, [d.ack_id for d in batch])
                empty_in_a_row += 1
                continue
            empty_in_a_row = 0
            seen.update(d.dead_letter_id for d in fresh)
            letters += fresh
            kept = {d.ack_id for d in fresh}
            release_letters(
                subscriber, subscription, [d.ack_id for d in batch if d.ack_id not in kept]
            )
    except BaseException:
        # Held letters go back at once, not after their ack deadline: a listing that failed
        # half-way must not make the next one see fewer letters than there are.
        release_letters(subscriber, subscription, [d.ack_id for d in letters])
        raise
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
        reading = read_letter(received)
        if reading.unreadable:
            logger.warning(
                "dead letter %s is unreadable (%s): listed, kept, never replayed",
                m.message_id,
                reading.unreadable,
            )
        letters.append(
            DeadLetter(
                message=reading.message,
                reason=reading.reason,
                detail=reading.detail,
                dead_lettered_at=m.publish_time,
                ack_id=item.ack_id,
                dead_letter_id=m.message_id,
                unreadable=reading.unreadable,
            )
        )
    return letters


def list_dead_letters(subscriber: Any, subscription: str, *, limit: int = 1000) -> list[DeadLetter]:
    """Up to ``limit`` dead letters; none is consumed (each is released at once)."""
    letters = pull_letters(subscriber, subscription, limit)
    release_letters(subscriber, subscription, [d.ack_id for d in letters])
    return letters
