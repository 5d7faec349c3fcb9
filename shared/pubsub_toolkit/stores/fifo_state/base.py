"""The consumer side's per-group state, and the store protocol that keeps it.

One small record per ``(consumer, group)`` holds everything the gate decides on:

* ``last_processed`` - the group's last-processed counter; for FIFO messages it *is* the dedup
  marker (``seq <= last`` means done), so advancing it is the single write that completes a
  message;
* ``lease_token`` / ``lease_until`` - who is running ``last + 1`` right now (fencing, as in
  dedup): a live lease means "in progress elsewhere";
* ``parked`` - the sequence numbers of early arrivals stored beside the record;
* ``gap_since`` - when the missing head was first noticed (for the gap timeout);
* ``attempts`` / ``next_attempt_at`` - failed runs of ``last + 1`` (for the poison limit) and
  when the next one may start (exponential backoff), and ``blocked_at`` when the group's poison
  policy is to block;
* ``skipped`` - tombstones as inclusive ranges ``(first, last)``: every number ever passed over
  by a skip, so a late arrival of any of them is recognised (never taken for a duplicate);
* ``keys`` - a short digest of the dedup key of each parked number and of the last
  ``KEY_WINDOW`` processed ones, so a *different* message carrying a number already taken
  (a producer reusing numbers, a counter rolled back by its store) is detected instead of
  being acked as a duplicate (after a sequence restart - see ``epoch`` - the old sequence's
  last keys sit at 0 and below);
* ``end_seq`` - set once the number the producer marked as the group's last (``fifo_end``)
  is behind the group: the group is **complete** (``last_processed`` stays at ``end_seq``, a
  later number is dead-lettered);
* ``epoch`` - the epoch of the counter whose numbers the record follows (0: not recorded, see
  :mod:`pubsub_toolkit.stores.counters.base`), and ``prior`` - ``(epoch, last_processed)`` of
  the few sequences before it, newest first: a counter that started again (its store lost it,
  or it expired with the idle group) is a new sequence, and a late copy of an old one is told
  from it;
* ``expire_at`` - when the store may delete the record (Redis ``PEXPIREAT``; Firestore's TTL
  policy on the state document's ``expire_at`` field; the memory store on its clock): a
  complete group's tombstone, and an **idle** group's record (nothing parked, not blocked),
  each a retention (``DEDUP_TTL``) after its last change. Until then the record refuses late
  numbers and acks redeliveries as duplicates, so ``expire_at`` must lie beyond the
  subscription's redelivery window; after it, the gate dead-letters a delivery older than the
  retention for a group without a record (``fifo_state_expired``) rather than run it again.
  A record that :func:`needs_attention` never expires.

Stores list a group (:meth:`FifoStore.groups`, what the sweeper visits) while :func:`listed`:
with the gate dating every idle record, that is exactly the groups with parked or blocked work,
so a sweep costs O(groups needing attention), not O(groups ever seen).

Every change is a compare-and-set on the record's version, so two consumer processes can work
the same subscription and only one advance of ``last`` ever wins.

(About 340 lines: the record, its JSON codec and the two store protocols, kept in one module so
every backend reads one definition of them.)
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Protocol

from pubsub_toolkit.attributes import format_time, parse_time
from pubsub_toolkit.message import Message

# How many processed numbers keep their key digest. A reused number further behind the head
# than this cannot be told from a late redelivery (README: "What a store can lose").
KEY_WINDOW = 64
# Prefixed to the digest a *filler* leaves: its number is taken, but no message ran there.
FILLER_MARK = "~"
# Prefixed to the digest of a message the gate skipped as poison (dead-lettered): a redelivered
# copy of that very message is already on the dead-letter topic, not a late arrival to keep.
POISON_MARK = "!"
Range = tuple[int, int]


def plain_digest(digest: str) -> str:
    """A recorded digest without its filler or poison mark: the message's own digest."""
    return digest.removeprefix(FILLER_MARK).removeprefix(POISON_MARK)


def key_digest(dedup_key: str) -> str:
    """A short, stable digest of a dedup key (64 bits: collisions are negligible per group)."""
    return hashlib.sha256(dedup_key.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class GroupState:
    """A group's gate state as read from the store; ``version`` is the store's CAS token."""

    last_processed: int = 0
    parked: tuple[int, ...] = ()
    gap_since: datetime | None = None
    attempts: int = 0
    blocked_at: int | None = None
    lease_token: int = 0
    lease_until: datetime | None = None
    skipped: tuple[Range, ...] = ()
    next_attempt_at: datetime | None = None
    keys: tuple[tuple[int, str], ...] = ()
    end_seq: int | None = None
    expire_at: datetime | None = None
    epoch: int = 0
    prior: tuple[Range, ...] = ()  # (epoch, last_processed) of earlier sequences, newest first
    version: object = field(default=None, compare=False)

    @property
    def complete(self) -> bool:
        """True once the group's marked last number is behind it: nothing may follow."""
        return self.end_seq is not None

    def expired(self, now: datetime) -> bool:
        """True once a store may forget this record (a complete or idle group's, see
        ``expire_at``)."""
        return self.expire_at is not None and now >= self.expire_at

    @property
    def head(self) -> int:
        """The number the group waits for."""
        return self.last_processed + 1

    def lease_live(self, now: datetime) -> bool:
        return self.lease_until is not None and now < self.lease_until

    def backing_off(self, now: datetime) -> bool:
        """True while the head's last failure asks to wait before the next attempt."""
        return self.next_attempt_at is not None and now < self.next_attempt_at

    def is_skipped(self, seq: int) -> bool:
        return any(first <= seq <= last for first, last in self.skipped)

    def key_of(self, seq: int) -> str | None:
        """The key digest recorded for ``seq`` (parked, running, or processed recently)."""
        digest = next((d for s, d in self.keys if s == seq), None)
        return None if digest is None else plain_digest(digest)

    def records(self, seq: int, digest: str) -> bool:
        """True when ``digest`` (plain) is recorded for ``seq``. A repaired store loss can
        record two messages at one processed number: the lost run and the number's reissue."""
        return any(s == seq and plain_digest(d) == digest for s, d in self.keys)

    def ran_at(self, seq: int) -> str | None:
        """The digest of the message that RAN at ``seq`` (not a filler), if recorded."""
        digest = next((d for s, d in self.keys if s == seq and s <= self.last_processed), None)
        return None if digest is None or digest.startswith((FILLER_MARK, POISON_MARK)) else digest

    def dead_lettered_poison(self, seq: int) -> str | None:
        """The digest of the message skipped as poison at ``seq`` (dead-lettered), if recorded."""
        digest = next((d for s, d in self.keys if s == seq), None)
        return digest.removeprefix(POISON_MARK) if digest and digest[0] == POISON_MARK else None

    def with_key(self, seq: int, digest: str) -> GroupState:
        """``digest`` recorded for ``seq`` unless one already is (the first one stays)."""
        if self.key_of(seq) is not None:
            return self
        return replace(self, keys=tuple(sorted((*self.keys, (seq, digest)))))

    def with_parked(self, seq: int, digest: str | None = None) -> GroupState:
        keys = self.keys
        if digest is not None and self.key_of(seq) is None:
            keys = tuple(sorted((*keys, (seq, digest))))
        return replace(self, parked=tuple(sorted({*self.parked, seq})), keys=keys)

    def advanced_to(
        self, seq: int, *, skipped: tuple[int, ...] = (), digest: str | None = None
    ) -> GroupState:
        """The state after ``seq`` was processed (or skipped): lease, attempts and gap reset."""
        keys = [(s, d) for s, d in self.keys if s != seq or digest is None]
        if digest is not None:
            keys.append((seq, digest))
        parked = tuple(s for s in self.parked if s > seq)
        oldest_kept = seq - KEY_WINDOW
        return replace(
            self,
            last_processed=seq,
            parked=parked,
            gap_since=None,
            attempts=0,
            next_attempt_at=None,
            blocked_at=None,
            lease_until=None,
            skipped=merge_ranges(self.skipped, skipped),
            keys=tuple(sorted((s, d) for s, d in keys if s > oldest_kept or s in parked)),
        )

    def to_json(self) -> str:
        return json.dumps(
            {
                "last": self.last_processed,
                "parked": list(self.parked),
                "gap_since": _time(self.gap_since),
                "attempts": self.attempts,
                "next_attempt_at": _time(self.next_attempt_at),
                "blocked_at": self.blocked_at,
                "lease_token": self.lease_token,
                "lease_until": _time(self.lease_until),
                "skipped": [list(r) for r in self.skipped],
                "keys": [[s, d] for s, d in self.keys],
                "end": self.end_seq,
                "expire_at": _time(self.expire_at),
                "epoch": self.epoch,
                "prior": [list(p) for p in self.prior],
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, raw: str | bytes, version: object = None) -> GroupState:
        doc = json.loads(raw)
        return cls(
            last_processed=int(doc["last"]),
            parked=tuple(int(s) for s in doc["parked"]),
            gap_since=_parse(doc["gap_since"]),
            attempts=int(doc["attempts"]),
            next_attempt_at=_parse(doc.get("next_attempt_at")),
            blocked_at=doc["blocked_at"],
            lease_token=int(doc["lease_token"]),
            lease_until=_parse(doc["lease_until"]),
            skipped=_ranges(doc["skipped"]),
            keys=tuple((int(s), str(d)) for s, d in doc.get("keys", [])),
            # .get: records written before groups could end have neither field.
            end_seq=None if doc.get("end") is None else int(doc["end"]),
            expire_at=_parse(doc.get("expire_at")),
            # .get: records written before epochs have neither field.
            epoch=int(doc.get("epoch", 0)),
            prior=tuple((int(e), int(last)) for e, last in doc.get("prior", [])),
            version=version,
        )


def needs_attention(state: GroupState) -> bool:
    """True while a sweeper has work in the group: parked copies (a head to run, a gap to time,
    a retry that is due, copies past an end to settle) or a block for an operator."""
    return bool(state.parked) or state.blocked_at is not None


def listed(state: GroupState) -> bool:
    """True while a store must list the group for the sweeper (:meth:`FifoStore.groups`): it
    needs attention, or its record does not expire (written before records were dated)."""
    return state.expire_at is None or needs_attention(state)


def merge_ranges(ranges: tuple[Range, ...], numbers: tuple[int, ...]) -> tuple[Range, ...]:
    """``ranges`` with ``numbers`` added, sorted and with touching ranges joined."""
    merged: list[Range] = []
    for first, last in sorted([*ranges, *((n, n) for n in numbers)]):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return tuple(merged)


def _ranges(raw: list[object]) -> tuple[Range, ...]:
    # Records written before ranges were used list single numbers.
    pairs = [(int(r), int(r)) if isinstance(r, int) else (int(r[0]), int(r[1])) for r in raw]  # type: ignore[index]
    return merge_ranges(tuple(pairs), ())


def _time(value: datetime | None) -> str | None:
    return None if value is None else format_time(value)


def _parse(value: str | None) -> datetime | None:
    return None if value is None else parse_time(value)


def encode_message(message: Message) -> str:
    """A parked message as JSON (payload base64), so every backend stores it as a string."""
    return json.dumps(
        {
            "data": base64.b64encode(message.data).decode(),
            "attributes": dict(message.attributes),
            "message_id": message.message_id,
            "ordering_key": message.ordering_key,
            "publish_time": _time(message.publish_time),
        },
        separators=(",", ":"),
    )


def decode_message(raw: str | bytes) -> Message:
    doc = json.loads(raw)
    return Message(
        data=base64.b64decode(doc["data"]),
        attributes=doc["attributes"],
        message_id=doc["message_id"],
        ordering_key=doc["ordering_key"],
        publish_time=_parse(doc["publish_time"]),
    )


class FifoStore(Protocol):
    """Gate state and parked messages per ``(consumer, group)``. One module per backend."""

    def load(self, consumer: str, group: str) -> GroupState:
        """The group's state; a fresh ``GroupState()`` (version None) if there is none."""
        ...

    def save(
        self, consumer: str, group: str, state: GroupState, expected: GroupState
    ) -> GroupState | None:
        """Write ``state`` if the stored version is still ``expected.version``.

        Returns ``state`` as now stored, carrying its new version (so the writer can
        compare-and-set its next change against it without reading the record again), or
        None if the expected version was stale.

        A ``state.expire_at`` (a complete group's tombstone) lets the store delete the record
        - and any parked copies left beside it - at that time, never before; a state without
        one is kept for good.
        """
        ...

    def park(self, consumer: str, group: str, seq: int, message: Message) -> None:
        """Store an early arrival (idempotent: the same seq twice keeps one copy)."""
        ...

    def parked_message(self, consumer: str, group: str, seq: int) -> Message | None: ...

    def unpark(self, consumer: str, group: str, seq: int) -> None:
        """Delete a parked message once its number is processed or skipped."""
        ...

    def groups(self, consumer: str) -> list[str]:
        """The consumer's groups whose record is :func:`listed` (what the sweeper visits):
        those that need attention, and any record without ``expire_at``."""
        ...


class AsyncFifoStore(Protocol):
    """:class:`FifoStore` for asyncio: the same operations and guarantees, awaited
    (``redis.asyncio``, Firestore's ``AsyncClient``, or memory for tests)."""

    async def load(self, consumer: str, group: str) -> GroupState: ...

    async def save(
        self, consumer: str, group: str, state: GroupState, expected: GroupState
    ) -> GroupState | None: ...

    async def park(self, consumer: str, group: str, seq: int, message: Message) -> None: ...

    async def parked_message(self, consumer: str, group: str, seq: int) -> Message | None: ...

    async def unpark(self, consumer: str, group: str, seq: int) -> None: ...

    async def groups(self, consumer: str) -> list[str]: ...
