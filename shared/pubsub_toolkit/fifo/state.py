"""The consumer side's per-group state, and the store protocol that keeps it.

One small record per ``(consumer, group)`` holds everything the gate decides on:

* ``last_processed`` - the group's last-processed counter; for FIFO messages it *is* the dedup
  marker (``seq <= last`` means done), so advancing it is the single write that completes a
  message;
* ``lease_token`` / ``lease_until`` - who is running ``last + 1`` right now (fencing, as in
  dedup): a live lease means "in progress elsewhere";
* ``parked`` - the sequence numbers of early arrivals stored beside the record;
* ``gap_since`` - when the missing head was first noticed (for the gap timeout);
* ``attempts`` - failed runs of ``last + 1`` (for the poison limit), and ``blocked_at`` when the
  group's poison policy is to block;
* ``skipped`` - tombstones: numbers passed over by a skip, kept for status and audit.

Every change is a compare-and-set on the record's version, so two consumer processes can work
the same subscription and only one advance of ``last`` ever wins.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Protocol

from pubsub_toolkit.attributes import format_time, parse_time
from pubsub_toolkit.message import Message

MAX_TOMBSTONES = 100  # keep the record small: only the most recent skips are listed


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
    skipped: tuple[int, ...] = ()
    version: object = field(default=None, compare=False)

    @property
    def head(self) -> int:
        """The number the group waits for."""
        return self.last_processed + 1

    def lease_live(self, now: datetime) -> bool:
        return self.lease_until is not None and now < self.lease_until

    def with_parked(self, seq: int) -> GroupState:
        return replace(self, parked=tuple(sorted({*self.parked, seq})))

    def advanced_to(self, seq: int, *, skipped: tuple[int, ...] = ()) -> GroupState:
        """The state after ``seq`` was processed (or skipped): lease, attempts and gap reset."""
        tombstones = (*self.skipped, *skipped)[-MAX_TOMBSTONES:]
        return replace(
            self,
            last_processed=seq,
            parked=tuple(s for s in self.parked if s > seq),
            gap_since=None,
            attempts=0,
            blocked_at=None,
            lease_until=None,
            skipped=tombstones,
        )

    def to_json(self) -> str:
        return json.dumps(
            {
                "last": self.last_processed,
                "parked": list(self.parked),
                "gap_since": _time(self.gap_since),
                "attempts": self.attempts,
                "blocked_at": self.blocked_at,
                "lease_token": self.lease_token,
                "lease_until": _time(self.lease_until),
                "skipped": list(self.skipped),
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
            blocked_at=doc["blocked_at"],
            lease_token=int(doc["lease_token"]),
            lease_until=_parse(doc["lease_until"]),
            skipped=tuple(int(s) for s in doc["skipped"]),
            version=version,
        )


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

    def save(self, consumer: str, group: str, state: GroupState, expected: GroupState) -> bool:
        """Write ``state`` if the stored version is still ``expected.version``; False if not."""
        ...

    def park(self, consumer: str, group: str, seq: int, message: Message) -> None:
        """Store an early arrival (idempotent: the same seq twice keeps one copy)."""
        ...

    def parked_message(self, consumer: str, group: str, seq: int) -> Message | None: ...

    def unpark(self, consumer: str, group: str, seq: int) -> None:
        """Delete a parked message once its number is processed or skipped."""
        ...

    def groups(self, consumer: str) -> list[str]:
        """Every group this consumer has state for (for status and the sweeper)."""
        ...
