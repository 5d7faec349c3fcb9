"""A delayed message's fate record, decided without I/O: its keys, its life, what it says.

A delayed message's fate is one dedup record in namespace ``relay`` (:data:`RELAY_NAMESPACE`),
keyed by :func:`fate_key`: whoever creates it first - a release or ``cancel`` - wins (the whole
story is in :mod:`pubsub_toolkit.delay.cancel`, which reads and writes it). Here:

* the keys: :func:`fate_key`, :func:`replayed_key` (a DLQ replay's original), :func:`cancel_keys`
  (the records whose tombstone cancels a message), :func:`renumbered_release_key` (a producer's
  retry at another FIFO number);
* what a record says: :func:`is_tombstone`, :func:`is_finished`, :func:`is_released`, and a
  release's result (:func:`released_result`, :func:`released_seq`, :func:`released_message_id`);
* :func:`cancel_verdict` - what ``cancel`` found on the record it claimed;
* :func:`replay_goes_on` - a DLQ replay's release once its original's record is settled.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.stores.dedup.base import Claim, ClaimStatus, DedupRecord, RecordState

RELAY_NAMESPACE = "relay"
CANCELLED = "cancelled"  # the tombstone's fingerprint: no message's fingerprint looks like it
# A tombstone must outlive the longest possible delay (the scheduler's MAX_DELAY, 365 days);
# a release record lives as long, so cancel() answers the same whenever it is asked.
TOMBSTONE_TTL = timedelta(days=366)


class Claimed(enum.StrEnum):
    """What a once-only step found on its record (the values of the dedup processor's
    ``Outcome``, which drivers pass as ``Claimed(outcome)``)."""

    PROCESSED = "processed"  # this call ran the effect
    DUPLICATE = "duplicate"  # the effect ran before: its stored result is the first run's
    MISMATCH = "mismatch"  # the record holds other content (or a cancel tombstone)


@dataclass(frozen=True, slots=True)
class Processed:
    """What a once-only step did, and the record's result (the release's ``{"id", "seq"}``)."""

    claimed: Claimed
    result: str | None = None


def fate_ttl(dedup_ttl: timedelta) -> timedelta:
    """How long a release record (namespace ``relay``) lives: as long as a tombstone, so a
    ``cancel`` long after the release still finds it and answers "delivered"."""
    return max(dedup_ttl, TOMBSTONE_TTL)


def fate_key(dedup_key: str, attributes: Mapping[str, str]) -> str:
    """The key of a message's fate record (and task): its own for a DLQ replay, and for each
    attempt of a consumer's delayed retry (``retry_consumer`` and ``retry_attempt``)."""
    key = dedup_key
    replay_id = attributes.get(attr.REPLAY_ID)
    if replay_id:
        key = f"{key}#replay:{replay_id}"
    consumer, attempt = attributes.get(attr.RETRY_CONSUMER), attributes.get(attr.RETRY_ATTEMPT)
    if consumer and attempt:
        key = f"{key}#retry:{consumer}:{attempt}"
    return key


def replayed_key(dedup_key: str, attributes: Mapping[str, str]) -> str | None:
    """The key of the message a DLQ replay (or a consumer's retry of one) replays: its own
    ``dedup_key``, which ``dlq replay`` sets to the original's; None when ``attributes`` carry
    no ``replay_id`` (the same test as :func:`fate_key`'s)."""
    return dedup_key if attributes.get(attr.REPLAY_ID) else None


def cancel_keys(fate_key: str, original_key: str | None) -> tuple[str, ...]:
    """The fate records whose tombstone cancels a message: its own - and a DLQ replay's
    original's (a message ``cancel()`` answered "not delivered" stays undelivered when an
    operator replays its dead letter)."""
    keys = (fate_key,) if original_key is None else (fate_key, original_key)
    return keys


def is_tombstone(record: DedupRecord | None) -> bool:
    """True when ``record`` is a cancel tombstone."""
    return record is not None and record.fingerprint == CANCELLED


def is_finished(record: DedupRecord | None) -> bool:
    """True when ``record`` is completed: a release's message is on the final topic."""
    return record is not None and record.state is RecordState.DONE


def is_released(record: DedupRecord | None) -> bool:
    """True when ``record`` is a finished release (not a tombstone)."""
    return is_finished(record) and not is_tombstone(record)


def released_result(message_id: str, seq: str | None) -> str:
    """A release record's result: the final topic's message id and the FIFO number."""
    return json.dumps({"id": message_id, "seq": seq})


def released_seq(result: str | None) -> str | None:
    """The FIFO number a release record was written for (None: none, or an older record)."""
    if not result or not result.startswith("{"):
        return None
    seq = json.loads(result).get("seq")
    return None if seq is None else str(seq)


def released_message_id(result: str | None) -> str:
    """The final topic's message id in a release record's result."""
    if result and result.startswith("{"):
        return str(json.loads(result).get("id") or "")
    return result or ""


class CancelVerdict(enum.StrEnum):
    """What ``cancel`` does with the claim it made on a fate record."""

    TOMBSTONE = "tombstone"  # the key was ours: complete the tombstone; never delivered
    CANCELLED = "cancelled"  # a tombstone already (an earlier cancel): never delivered
    DELIVERED = "delivered"  # a finished release got there first: too late
    IN_PROGRESS = "in_progress"  # another cancel, or a release, is half-way: try again
    UNFINISHED = "unfinished"  # a release claimed and not finished: try again

    @property
    def delivered(self) -> bool:
        """The message reached (or is reaching) the final topic."""
        return self is CancelVerdict.DELIVERED


def cancel_verdict(claim: Claim) -> CancelVerdict:
    """Decide on the claim ``cancel`` made with the fingerprint :data:`CANCELLED`.

    A release claimed and not finished may or may not have published (its relay may have died
    before it, and its last attempt may yet give the message up), so neither answer is known
    true - even once the lease has ended: only a finished release is "delivered".
    """
    if claim.owns_key:
        return CancelVerdict.TOMBSTONE
    if claim.status is ClaimStatus.IN_PROGRESS:
        return CancelVerdict.IN_PROGRESS
    if claim.status is ClaimStatus.MISMATCH:
        return CancelVerdict.DELIVERED if is_finished(claim.record) else CancelVerdict.UNFINISHED
    return CancelVerdict.CANCELLED


def renumbered_release_key(key: str, seq: str | None, processed: Processed) -> str | None:
    """The record a copy at another FIFO number is released under (a producer's retry
    renumbered by the counter), or None: released (or refused) under ``key`` itself.

    Released once per number: the consumer's gate runs the lowest number holding the key and
    fills the others, so the group neither stalls on the missing number nor runs it twice.
    """
    if processed.claimed is not Claimed.DUPLICATE or seq is None:
        return None
    first = released_seq(processed.result)
    if first is None or first == seq:
        return None
    return f"{key}#fifo_seq:{seq}"


class Replay(enum.StrEnum):
    """What a DLQ replay's release does once it has settled its original's record."""

    RELEASED = "released"  # the original never went out: released while holding its record
    CANCELLED = "cancelled"  # the original was cancelled: nothing is published
    OWN = "own"  # the original was decided before, not by a cancel: release under its own


def replay_goes_on(released_inside: bool, original: Claimed, cancelled: bool | None) -> Replay:
    """Decide a replay's release after the claim on its original's record.

    ``released_inside``: the replay was released while holding the original's record (it was
    free). ``cancelled``: whether the original's record is a tombstone - read only on a
    mismatch (None otherwise).
    """
    if released_inside:  # the original never went out: its record now says this replay did
        return Replay.RELEASED
    if original is Claimed.MISMATCH and cancelled:
        return Replay.CANCELLED  # cancelled: the replay is not published either
    # Decided before, not by a cancel: released already (or an impostor's content, replayed
    # by an operator): the replay goes out under its own record.
    return Replay.OWN
