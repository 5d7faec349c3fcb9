"""Ingress routing, decided without I/O: what ingress does with each delivery.

:class:`~pubsub_toolkit.ingress.pipeline.Ingress` reads the delivery, claims its dedup key,
publishes, schedules and dead-letters; every choice between those is made here, from values:

* :func:`claim_key` - the key a delivery is claimed under (a replay's own);
* :func:`after_claim` - what the claim found: route it (the claim ran :func:`route`'s effect),
  a duplicate (and whether a producer's renumbered retry needs its number filled), or a reused
  key with other content (dead-lettered once per content);
* :func:`route` - publish now, schedule, release through the fate record (already due), or
  refuse (due later with no scheduler);
* :func:`renumbered` - a duplicate at another FIFO number: a filler, or routed again;
* :func:`rejection` and :func:`dead_letter_filler` - a refused delivery's once-only dead letter
  and the filler a dead-lettered FIFO number needs.

**FIFO numbers never go missing.** A duplicate carrying a *different* number than its first
copy - a producer's retry after a publish that timed out but had been accepted, numbered again
by the counter - is routed too, once per number: the consumer's gate runs the lowest number
holding the key and fills the others. For every number ingress cannot forward a message for,
it forwards a *filler* (a message with ``fifo_group``, ``fifo_seq``, the dedup key and
``fifo_filler`` = why, no data), so the consumer's gate moves past the number instead of
waiting for it forever:

* a FIFO message ingress dead-letters (contract violation, fingerprint mismatch - unless its
  number may be its key's first copy's own - no delayed delivery): ``fifo_filler=
  dead_lettered:REASON``, a tombstone at the consumer (a late replay of it is kept with
  ``fifo_late_after_skip``, not taken for a duplicate).

A message already due that carries a due time is released through the same record the relay
and ``cancel`` use (namespace ``relay``), so ``cancel`` answers what really happened even when
a delayed message reaches ingress late. A ``replay_id`` is honoured only when the replay path
minted it (:mod:`pubsub_toolkit.dead_letters.replay`); otherwise the message is dead-lettered
``forged_replay_id``.

What ingress reports (:class:`IngressOutcome`, :class:`IngressResult`) and stores per key
(:class:`Routed`) are defined here too; the release under the fate record is
:func:`pubsub_toolkit.core.release.release`. (About 300 lines: the routing and the record it
keeps per key are read together.)
"""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Protocol

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.core.fate import Claimed
from pubsub_toolkit.core.release import Filler
from pubsub_toolkit.envelope import Envelope
from pubsub_toolkit.message import Message, OutboundMessage
from pubsub_toolkit.stores.fifo_state.base import KEY_WINDOW

REASON_DELAY_UNAVAILABLE = "delayed_delivery_unavailable"


class IngressOutcome(enum.StrEnum):
    """What ingress did with one delivery (every one of them means: ack)."""

    PUBLISHED = "published"
    SCHEDULED = "scheduled"
    DUPLICATE = "duplicate"
    DEAD_LETTERED = "dead_lettered"
    CANCELLED = "cancelled"  # due on arrival, but cancelled before it could be released


@dataclass(frozen=True)
class Routed:
    """What the first copy of a key did - stored as the dedup result, so duplicates know it
    (``seq`` lets a producer's renumbered retry be told from a plain redelivery)."""

    outcome: IngressOutcome
    detail: str = ""
    seq: int | None = None
    # The first copy's group, and whether the record says where the first copy went at all
    # (``placed``: its group and number, None for none) - records written before it was kept
    # do not, and then a fingerprint mismatch cannot tell whose number it carries.
    group: str | None = None
    placed: bool = False

    def placed_in(self, group: str | None) -> Routed:
        """This routing, recording the group (and number) the first copy had."""
        return replace(self, group=group, placed=True)

    def to_result(self) -> str:
        """The dedup record's result."""
        doc: dict[str, object] = {"o": self.outcome.value, "d": self.detail, "seq": self.seq}
        if self.placed:
            doc["g"] = self.group
        return json.dumps(doc)

    @classmethod
    def from_result(cls, result: str | None) -> Routed:
        """Read a dedup record's result back (older versions wrote ``kind:detail``)."""
        if result and result.startswith("{"):
            doc = json.loads(result)
            return cls(IngressOutcome(doc["o"]), doc["d"], doc.get("seq"), doc.get("g"), "g" in doc)
        kind, _, detail = (result or "published:").partition(":")  # written by older versions
        return cls(IngressOutcome(kind), detail)


@dataclass(frozen=True)
class IngressResult:
    """What ingress answers for one delivery."""

    outcome: IngressOutcome
    dedup_key: str | None
    detail: str = ""


class Scheduler(Protocol):
    """Parks a message until its due time (Cloud Tasks; see the delay package)."""

    def schedule(self, message: OutboundMessage, deliver_at: datetime, dedup_key: str) -> str:
        """Arrange for ``message`` to reach the final topic at ``deliver_at``; return a task id."""
        ...


@dataclass(frozen=True)
class DeadLetter:
    """A dead letter sent once per ``once_key`` (ingress's rejections namespace), claimed with
    ``fingerprint``; ``fill``: a FIFO number then gets a filler (:func:`dead_letter_filler`)."""

    reason: str
    detail: str
    dedup_key: str | None
    once_key: str
    fingerprint: str
    fill: bool = True


@dataclass(frozen=True)
class AfterClaim:
    """What ingress answers once its claim of the key settled: ``dead_letter`` to send (a
    fingerprint mismatch), or ``first``, a duplicate's first copy (:func:`renumbered`)."""

    result: IngressResult
    dead_letter: DeadLetter | None = None
    first: Routed | None = None


def claim_key(dedup_key: str, replay_id: str | None) -> str:
    """The key a delivery is claimed under. A replay from the dead-letter topic has its own:
    the original key is already recorded (as dead-lettered) and would drop it as a duplicate."""
    return dedup_key if not replay_id else f"{dedup_key}#replay:{replay_id}"


def after_claim(claimed: Claimed, result: str | None, envelope: Envelope) -> AfterClaim:
    """Decide on the claim of ``envelope``'s key; ``result``: the routing the record holds."""
    key = envelope.dedup_key
    if claimed is Claimed.MISMATCH:
        # Once per (key, content): every redelivery of the same impostor is the same case.
        # Its FIFO number is filled unless it may be the first copy's own (still on its way:
        # a filler could overtake it) - at another number, or in another group, nothing else
        # would ever fill it and the group would wait for it for good. ``result``: the first
        # copy's record, None while unknown (then no filler, as records without its place).
        first = Routed.from_result(result) if result else None
        fill = (
            first is not None
            and first.placed
            and (first.group, first.seq) != (envelope.fifo_group, envelope.fifo_seq)
        )
        letter = DeadLetter(
            attr.REASON_FINGERPRINT_MISMATCH,
            f"dedup_key {key!r} was first seen with different content",
            key,
            f"mismatch:{key}:{envelope.fingerprint}",
            envelope.fingerprint,
            fill=fill,
        )
        result_ = IngressResult(IngressOutcome.DEAD_LETTERED, key, attr.REASON_FINGERPRINT_MISMATCH)
        return AfterClaim(result_, dead_letter=letter)
    routed = Routed.from_result(result)
    if claimed is Claimed.DUPLICATE:
        return AfterClaim(IngressResult(IngressOutcome.DUPLICATE, key, routed.detail), first=routed)
    return AfterClaim(IngressResult(routed.outcome, key, routed.detail))


class Route(enum.StrEnum):
    """Where a message goes."""

    PUBLISH = "publish"  # to the final topic, now
    SCHEDULE = "schedule"  # to the scheduler, due later
    RELEASE = "release"  # due already, with a due time: through its fate record (cancel wins)
    UNDELIVERABLE = "undeliverable"  # due later, no scheduler: dead-lettered, never early


def route(deliver_at: datetime | None, now: datetime, *, can_schedule: bool) -> Route:
    """Route a message due at ``deliver_at`` (None: no due time) at ``now``.

    Any due time in the future is scheduled: publishing "almost due" messages at once would
    deliver them early, which the contract never does.
    """
    if deliver_at is not None and deliver_at > now:
        return Route.SCHEDULE if can_schedule else Route.UNDELIVERABLE
    if deliver_at is not None:
        return Route.RELEASE
    return Route.PUBLISH


def undeliverable_detail(deliver_at: datetime) -> str:
    """Why a message due later was dead-lettered (reason :data:`REASON_DELAY_UNAVAILABLE`)."""
    return f"message is due at {attr.format_time(deliver_at)} but no scheduler is configured"


@dataclass(frozen=True)
class Renumbered:
    """A renumbered retry's number, filled once under ``once_key``: by ``filler``, or (None)
    by routing this copy as well. ``first_seq_unknown``: its first copy was recorded without
    its number (an older version), so this may be a plain redelivery (logged)."""

    once_key: str
    filler: Filler | None
    first_seq_unknown: bool = False


def renumbered(envelope: Envelope, claim_key: str, first: Routed) -> Renumbered | None:
    """A duplicate at another number than its first copy (a producer's retry renumbered by
    the counter): its number must reach the consumer too, once. None: nothing to fill.

    Delivered or scheduled first copy at a LOWER number: this number carries nothing (a filler
    naming the first copy's), so the message runs once, at its first place - however far apart
    the numbers are (the gate recognises a key only within its last ``KEY_WINDOW`` numbers, and
    a retry can come thousands later). At a HIGHER number within that window: route this copy
    as well (scheduled if due later - its task name carries the number); the gate runs the
    lowest number holding the key and fills the other. Further apart than the window, the gate
    could not tell, so this lower number is the filler and the message runs at the first copy's
    place (the docs' weaker guarantee). A first copy that was dead-lettered or cancelled: a
    filler saying so. Recorded by an older version without its number: a second routing would
    cost nothing but a filler - route it.
    """
    seq, group = envelope.fifo_seq, envelope.fifo_group
    if seq is None or group is None or seq == first.seq:
        return None
    unknown = first.seq is None and first.outcome is not IngressOutcome.DEAD_LETTERED
    once_key = f"{claim_key}#fifo_seq:{seq}"
    key, epoch = envelope.dedup_key, envelope.message.attributes.get(attr.FIFO_EPOCH)
    why: str | None = None
    if first.outcome is IngressOutcome.DEAD_LETTERED:
        why = f"{attr.FILLER_DEAD_LETTERED}{first.detail}"
    elif first.outcome is IngressOutcome.CANCELLED:
        why = attr.FILLER_CANCELLED
    elif first.seq is not None and not 0 < first.seq - seq < KEY_WINDOW:
        why = f"{attr.FILLER_RENUMBERED}{first.seq}"
    filler = None if why is None else Filler(group, seq, key, why, epoch)
    return Renumbered(once_key, filler, unknown)


def dead_letter_filler(message: Message, reason: str, dedup_key: str | None) -> Filler | None:
    """The filler for a dead-lettered message's valid FIFO number (None: none), a tombstone
    at the consumer, so a late replay of it is kept (``fifo_late_after_skip``) rather than
    taken for a duplicate, and its group moves past the number."""
    number = attr.fifo_number(message)
    if number is None:
        return None
    group, seq = number
    why = f"{attr.FILLER_DEAD_LETTERED}{reason}"
    return Filler(
        group, seq, dedup_key or message.message_id, why, message.attributes.get(attr.FIFO_EPOCH)
    )


def cancelled_filler(envelope: Envelope) -> Filler | None:
    """The filler for a cancelled FIFO message's number (None: not FIFO)."""
    if envelope.fifo_group is None or envelope.fifo_seq is None:
        return None
    epoch = envelope.message.attributes.get(attr.FIFO_EPOCH)
    return Filler(
        envelope.fifo_group, envelope.fifo_seq, envelope.dedup_key, attr.FILLER_CANCELLED, epoch
    )


def rejection(message: Message, reason: str, detail: str) -> DeadLetter:
    """The dead letter of an invalid delivery, sent once however often Pub/Sub redelivers it.

    Invalid messages are deduplicated in a separate namespace (their dedup_key may be the very
    thing that is wrong and must not be reserved), by :func:`rejection_key`.
    """
    key = message.attributes.get(attr.DEDUP_KEY) or message.message_id or None
    fingerprint = attr.content_fingerprint(message.data, message.attributes)
    return DeadLetter(reason, detail, key, rejection_key(message, fingerprint), fingerprint)


def rejection_key(message: Message, fingerprint: str) -> str:
    """Which refused deliveries are one message, dead-lettered once.

    With a producer's ``dedup_key``: every copy of the same content at the same number - a
    producer's retry of a publish that timed out after Pub/Sub accepted it has a new message
    id, and is the same message - except a ``dlq replay`` of it (its ``replay_id``), which took
    the letter off the dead-letter topic and must leave a new one. Without a ``dedup_key``:
    each message id (its only identity), with its content (a message id alone can repeat: the
    emulator restarts its ids at 1). Hashed: the key may be the invalid part (too long...).
    """
    attrs = message.attributes
    own = attrs.get(attr.DEDUP_KEY)
    if not own:
        return f"{message.message_id}:{fingerprint}"
    parts = (own, attrs.get(attr.FIFO_SEQ, ""), attrs.get(attr.REPLAY_ID, ""))
    named = hashlib.sha256(json.dumps(parts).encode()).hexdigest()
    return f"key:{named}:{fingerprint}"
