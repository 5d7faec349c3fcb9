"""Cancelling a delayed message before its due time: one record decides, cancel or release.

A delayed message's fate is ONE dedup record in namespace ``relay``, keyed by its dedup key,
and whoever creates it first wins:

* the relay (or ingress, for a message already due when it arrives) claims it with the
  message's fingerprint and only then publishes;
* :func:`cancel` claims it with the fingerprint ``cancelled`` and completes it at once - a
  *tombstone* that outlives the longest delay.

Both kinds live :data:`TOMBSTONE_TTL` (366 days), not ``DEDUP_TTL``: were the release record to
expire first, a later ``cancel`` would find no record, write a tombstone and answer "not
delivered" about a message that went out long ago. Every writer of a release record takes its
TTL from :func:`fate_ttl`.

So a ``cancel`` that lands between the relay's checks and its publish cannot answer "not
delivered" while the message goes out: either the tombstone exists and the relay publishes
nothing (a later hop, or a task already dispatched, finds it too), or the relay's claim exists
and ``cancel`` answers ``already_delivered=True`` once the release is done - while it is only
claimed, ``cancel`` raises ``ClaimInProgressError`` (try again): the relay may have died before
its publish, and its last attempt may give the message up (dead-lettered, or handed to the
operator), so "delivered" is not known true until the record says done. A plain message's
first task is deleted as well, to save a call; a FIFO message's task is left to fire (its name
carries the number, so ``delete`` does not find it), because the relay must then publish a
filler for its number.

A replay from the dead-letter topic has its own fate record, ``dedup_key#replay:ID``
(:func:`fate_key`): the original's record may already be decided. So has a consumer's delayed
retry (``RetryLater``), ``dedup_key#retry:CONSUMER:ATTEMPT``: a message that was delayed once
already has a done record under its key, and each attempt of each consumer is released once.

A replay's release also claims its *original's* record (``release_once`` with
``original_key``), as the original's own release would, and publishes while it holds it: a
tombstone there refuses the replay; a record nobody wrote yet (the original never went out: it
was dead-lettered instead) ends up saying the replay released it, so a later ``cancel``
answers "delivered" (one landing during the publish finds the claim held, and tries again); a
done record (the original went out) lets the replay go on under its own. Cancel and replay
thus meet on one record too: a cancel landing after the replay's checks can neither answer
"not delivered" about a replay on the final topic nor be overtaken by one. The callers name
the original key (a replay's ``dedup_key``, see :func:`replayed_key`); nothing is read back
out of a fate key, which a producer's own key may resemble (``order#replay:7``).

The decisions - what ``cancel`` found, which records a release claims - are
:mod:`pubsub_toolkit.core.fate`'s, and what a release does between its checks is
:mod:`pubsub_toolkit.core.release`'s; this module reads and writes the records they name.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

from pubsub_toolkit.attributes import FIFO_SEQ
from pubsub_toolkit.clock import Clock
from pubsub_toolkit.core import fate as core
from pubsub_toolkit.core import release as releasing
from pubsub_toolkit.core.fate import (
    CANCELLED,
    RELAY_NAMESPACE,
    TOMBSTONE_TTL,
    CancelVerdict,
    Claimed,
    Processed,
    fate_key,
    fate_ttl,
    released_message_id,
    released_seq,
    replayed_key,
)
from pubsub_toolkit.core.release import ReleaseVerdict
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor, Outcome, ProcessResult
from pubsub_toolkit.errors import ClaimInProgressError
from pubsub_toolkit.message import OutboundMessage
from pubsub_toolkit.stores.dedup.base import DedupStore

__all__ = [  # the fate record's names, defined in the core, are used from here too
    "CANCELLED",
    "RELAY_NAMESPACE",
    "TOMBSTONE_TTL",
    "CancelResult",
    "TaskDeleter",
    "cancel",
    "fate_key",
    "fate_ttl",
    "is_cancelled",
    "is_released",
    "release_once",
    "released_message_id",
    "released_seq",
    "replayed_key",
    "run_release",
]

logger = logging.getLogger(__name__)


class TaskDeleter(Protocol):
    """What cancel needs of the scheduler: delete the first task of a key."""

    def delete(self, dedup_key: str, hop: int = 0) -> bool: ...


@dataclass(frozen=True)
class CancelResult:
    """What cancelling found: whether a task was deleted, and whether it was too late.

    ``already_delivered`` False means the message will never reach the final topic;
    True means it has been (or is being) released.
    """

    dedup_key: str
    task_deleted: bool
    already_delivered: bool

    @property
    def cancelled(self) -> bool:
        return not self.already_delivered


def cancel(dedup_key: str, *, store: DedupStore, scheduler: TaskDeleter) -> CancelResult:
    """Cancel the delayed message ``dedup_key``; idempotent.

    Raises :class:`~pubsub_toolkit.errors.ClaimInProgressError` while another ``cancel`` of the
    same key, or its release (a DLQ replay's included), is half-way (try again) - a release
    claimed and never finished too, however long ago: only a finished release is "delivered"
    (:func:`~pubsub_toolkit.core.fate.cancel_verdict`).
    """
    claim = store.claim(
        RELAY_NAMESPACE, dedup_key, CANCELLED, lease=timedelta(minutes=1), ttl=TOMBSTONE_TTL
    )
    verdict = core.cancel_verdict(claim)
    if verdict is CancelVerdict.TOMBSTONE:
        store.complete(RELAY_NAMESPACE, dedup_key, claim, CANCELLED, ttl=TOMBSTONE_TTL)
    elif verdict is CancelVerdict.IN_PROGRESS:
        raise ClaimInProgressError(f"another cancel or a release of {dedup_key!r} is in progress")
    elif verdict is CancelVerdict.UNFINISHED:
        raise ClaimInProgressError(
            f"a release of {dedup_key!r} is claimed and unfinished: try again once it settles"
        )
    delivered = verdict.delivered  # the relay's own release got there first
    deleted = False if delivered else scheduler.delete(dedup_key)
    logger.info(
        "cancel %s: %s (task deleted=%s)",
        dedup_key,
        "too late, released" if delivered else "cancelled",
        deleted,
    )
    return CancelResult(dedup_key, task_deleted=deleted, already_delivered=delivered)


def is_cancelled(store: DedupStore, fate_key: str, original_key: str | None = None) -> bool:
    """True when the fate record ``fate_key`` is a cancel tombstone - or, for a DLQ replay
    (``original_key``: the key of the message it replays, :func:`replayed_key`), the
    original's is (:func:`~pubsub_toolkit.core.fate.cancel_keys`; one more read, for
    replays only).

    ``is_cancelled(store, dedup_key)`` asks about a message itself. Nothing is read out of
    ``fate_key``'s text: a producer's own key may look like a replay's (``order#replay:7``)."""
    keys = core.cancel_keys(fate_key, original_key)
    return any(core.is_tombstone(store.get(RELAY_NAMESPACE, key)) for key in keys)


def is_released(store: DedupStore, dedup_key: str) -> bool:
    """True when the relay (or ingress) has released ``dedup_key``."""
    return core.is_released(store.get(RELAY_NAMESPACE, dedup_key))


def run_release(
    protocol: releasing.Protocol[ReleaseVerdict],
    *,
    cancelled: Callable[[], bool],
    release: Callable[[], ProcessResult],
    clock: Clock,
) -> ReleaseVerdict:
    """Perform :func:`~pubsub_toolkit.core.release.release`'s effects: ``cancelled`` reads the
    tombstones, ``release`` is the caller's :func:`release_once`."""

    def perform(effect: releasing.Effect) -> releasing.Reply:
        if type(effect) is releasing.CheckCancelled:
            return cancelled()
        if type(effect) is releasing.ReadClock:
            return clock.now()
        if type(effect) is releasing.Wait:
            clock.sleep(effect.seconds)
            return None
        processed = release()
        return Processed(Claimed(processed.outcome), processed.result)

    return releasing.drive(protocol, perform)


def release_once(
    releases: IdempotentProcessor,
    publish: Callable[[OutboundMessage], str],
    message: OutboundMessage,
    key: str,
    fingerprint: str,
    *,
    store: DedupStore,
    original_key: str | None,
) -> ProcessResult:
    """Publish a due message once per key under its fate record (namespace ``relay``).

    The record's result keeps the FIFO number it was released at. A copy of the same key at
    *another* number (a producer's retry renumbered by the counter) is released too, once per
    number (:func:`~pubsub_toolkit.core.fate.renumbered_release_key`).

    A DLQ replay (``original_key``: the message it replays) is released while holding the
    original's record too (see the module doc). When that record is a tombstone nothing is
    published and the outcome is MISMATCH, as for a tombstone under ``key`` itself: the
    caller's :func:`is_cancelled` (reading ``store``) tells a cancel from other content.
    """
    if original_key is None:
        return _release(releases, publish, message, key, fingerprint)
    released: list[ProcessResult] = []

    def release_replay() -> str | None:
        own = _release(releases, publish, message, key, fingerprint)
        if own.outcome is Outcome.MISMATCH:
            raise _NotReleased(own)  # nothing went out: the original's claim is let go
        released.append(own)
        return own.result

    try:
        original = releases.process(original_key, fingerprint, release_replay)
    except _NotReleased as refused:
        return refused.result
    claimed = Claimed(original.outcome)
    cancelled = is_cancelled(store, original_key) if claimed is Claimed.MISMATCH else None
    goes_on = core.replay_goes_on(bool(released), claimed, cancelled)
    if goes_on is core.Replay.RELEASED:
        return released[0]
    if goes_on is core.Replay.CANCELLED:
        return original
    return _release(releases, publish, message, key, fingerprint)


class _NotReleased(Exception):
    """A replay's own record refused it, inside its hold on the original's record."""

    def __init__(self, result: ProcessResult) -> None:
        super().__init__(result.outcome.value)
        self.result = result


def _release(
    releases: IdempotentProcessor,
    publish: Callable[[OutboundMessage], str],
    message: OutboundMessage,
    key: str,
    fingerprint: str,
) -> ProcessResult:
    seq = message.attributes.get(FIFO_SEQ)

    def effect() -> str:
        return core.released_result(publish(message), seq)

    processed = releases.process(key, fingerprint, effect)
    again = core.renumbered_release_key(
        key, seq, Processed(Claimed(processed.outcome), processed.result)
    )
    if again is not None:
        releases.process(again, fingerprint, effect)
    return processed
