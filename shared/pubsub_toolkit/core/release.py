"""The release of a due delayed message, decided without I/O (its fate record: :mod:`.fate`).

* :func:`release` - the release of a due message, by the relay (when Cloud Tasks calls) and by
  ingress (a delayed message already due on arrival): a generator that *yields* the effects it
  needs (:class:`CheckCancelled`, :class:`ReadClock`, :class:`Wait`, :class:`ReleaseOnce`) and
  returns a :class:`ReleaseVerdict` - cancelled, the next hop, a mismatch, a duplicate or
  published (the sans-I/O style of :mod:`pubsub_toolkit.stores.dedup.claims`); :func:`drive`
  runs it, or :mod:`.handover`'s protocols, against a driver's effects;
* the relay's keys and messages around it: :func:`release_fingerprint`, :func:`hop_key`,
  :func:`rejection_key`, :func:`mismatch_key`, :func:`filler_for` (a FIFO number that carries
  nothing), :func:`fifo_fields`.

Everything here is a function of its arguments: no store, no clock, no Pub/Sub.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypeVar

from pubsub_toolkit import _drive
from pubsub_toolkit import attributes as attr
from pubsub_toolkit.core.fate import Claimed, Processed, fate_key, released_message_id
from pubsub_toolkit.message import OutboundMessage

T = TypeVar("T")
E = TypeVar("E")
R = TypeVar("R")

# Cloud Tasks dispatches on time, but a clock difference of a moment must never make a message
# early: if the task fires up to this much before the due time, the relay waits it out.
MAX_WAIT = timedelta(seconds=2)


# The release protocol's effects and replies.


@dataclass(frozen=True, slots=True)
class CheckCancelled:
    """Read whether the fate record - or, for a DLQ replay, its original's - is a cancel
    tombstone. Replies a bool."""


@dataclass(frozen=True, slots=True)
class ReadClock:
    """Read the clock. Replies a datetime."""


@dataclass(frozen=True, slots=True)
class Wait:
    """Sleep ``seconds`` (a task fired a moment early). Replies None."""

    seconds: float


@dataclass(frozen=True, slots=True)
class ReleaseOnce:
    """Publish the message once under its fate record (``release_once``). Replies
    :class:`~.fate.Processed`."""


Effect = CheckCancelled | ReadClock | Wait | ReleaseOnce
Reply = bool | datetime | Processed | None
Protocol = Generator[Effect, Reply, T]


class Release(enum.StrEnum):
    """How a release ended."""

    CANCELLED = "cancelled"  # a tombstone: publish nothing (a FIFO number gets a filler)
    HOP = "hop"  # still far from due: park the next hop
    MISMATCH = "mismatch"  # released before with other content: dead-letter this one
    DUPLICATE = "duplicate"  # released before: the first release's message id
    PUBLISHED = "published"  # released now


@dataclass(frozen=True)
class ReleaseVerdict:
    """The end of :func:`release`: ``message_id`` on the final topic (duplicate, published),
    how many seconds late a timed release was (published; never negative), and whether a
    cancel was found only after the claim (it landed between the check and the claim)."""

    release: Release
    message_id: str = ""
    lateness: float | None = None
    after_claim: bool = False


def release(deliver_at: datetime | None) -> Protocol[ReleaseVerdict]:
    """Release a due message under its fate record; a cancel tombstone wins, before the claim
    and between the check and the claim alike.

    ``deliver_at``: the due time, for the relay (a task fired more than :data:`MAX_WAIT` early
    is a long delay's intermediate hop; less early, it waits the moment out: never early). None
    for ingress, which releases only what its route found due already.
    """
    if (yield from _cancelled()):
        return ReleaseVerdict(Release.CANCELLED)
    if deliver_at is not None:
        remaining = deliver_at - (yield from _now())
        if remaining > MAX_WAIT:
            return ReleaseVerdict(Release.HOP)
        if remaining > timedelta(0):
            yield Wait(remaining.total_seconds())  # never early, even by a clock's hair
    processed = yield ReleaseOnce()
    assert type(processed) is Processed
    if processed.claimed is Claimed.MISMATCH:
        if (yield from _cancelled()):  # cancelled between check and claim
            return ReleaseVerdict(Release.CANCELLED, after_claim=True)
        return ReleaseVerdict(Release.MISMATCH)
    message_id = released_message_id(processed.result)
    if processed.claimed is Claimed.DUPLICATE:
        return ReleaseVerdict(Release.DUPLICATE, message_id)
    if deliver_at is None:
        return ReleaseVerdict(Release.PUBLISHED, message_id)
    # How late the release was (Cloud Tasks' dispatch, retries, a cold start): never
    # negative, the relay waits out an early call.
    lateness = ((yield from _now()) - deliver_at).total_seconds()
    return ReleaseVerdict(Release.PUBLISHED, message_id, max(lateness, 0.0))


def _cancelled() -> Protocol[bool]:
    reply = yield CheckCancelled()
    assert type(reply) is bool
    return reply


def _now() -> Protocol[datetime]:
    reply = yield ReadClock()
    assert isinstance(reply, datetime)
    return reply


# Run synchronously (the release here, the hand-over of :mod:`.handover`): the loop every
# protocol shares (pubsub_toolkit._drive).
drive = _drive.run


# The relay's keys and messages around the release.


def release_fingerprint(message: OutboundMessage) -> str:
    """The content fingerprint a release claims with: the one ingress stamped, else computed."""
    return message.attributes.get(attr.CONTENT_SHA256) or (
        attr.content_fingerprint(message.data, message.attributes)
    )


def hop_key(dedup_key: str, attributes: Mapping[str, str], hop: int) -> str:
    """The once-only key of a long delay's next hop: per fate (a replay's, a retry attempt's:
    not the original's hops, already done) and per FIFO number (a renumbered copy of the key
    hops on its own)."""
    key = fate_key(dedup_key, attributes)
    seq = attributes.get(attr.FIFO_SEQ)
    return f"{key}#{hop}" if seq is None else f"{key}#{seq}#{hop}"


def rejection_key(body: bytes) -> str:
    """Which malformed task bodies are one, dead-lettered once: the same bytes."""
    return hashlib.sha256(body).hexdigest()


def mismatch_key(key: str, fingerprint: str) -> str:
    """Which fingerprint mismatches are one, dead-lettered once: a key and its content."""
    return f"mismatch:{key}:{fingerprint}"


def mismatch_detail(key: str) -> str:
    """The dead letter's detail for a release refused for its content."""
    return f"dedup_key {key!r} was released before with different content"


@dataclass(frozen=True)
class Filler:
    """A message for a FIFO number that carries nothing, so its group moves past it."""

    group: str
    seq: int | str
    dedup_key: str
    why: str
    epoch: str | None = None

    def message(self) -> OutboundMessage:
        """The filler as published to the final topic."""
        return attr.filler_message(self.group, self.seq, self.dedup_key, self.why, epoch=self.epoch)


def filler_for(attributes: Mapping[str, str], dedup_key: str, why: str) -> Filler | None:
    """The filler for a FIFO message's number (None for others): cancelled, dead-lettered or
    handed to the operator, its group must not wait for it."""
    group, seq = attributes.get(attr.FIFO_GROUP), attributes.get(attr.FIFO_SEQ)
    if not (group and seq):
        return None
    return Filler(group, seq, dedup_key, why, attributes.get(attr.FIFO_EPOCH))


def fifo_fields(attributes: Mapping[str, str]) -> dict[str, str]:
    """A FIFO message's group and number, as an ALERT's fields (none for others): an operator
    whose group waits at that number sees why."""
    return {
        name: attributes[name] for name in (attr.FIFO_GROUP, attr.FIFO_SEQ) if name in attributes
    }
