"""The FIFO gate's verdicts on a run: pure functions of values (a group's state, a message, an
exception, a policy) that the protocol modules (:mod:`.fifo_parts`, :mod:`.fifo_run`,
:mod:`.fifo_epochs`) call at each decision they take - no store, no clock, no I/O.

Each is a decision a past defect lived in, named so a test (and the simulation's mutations,
``tests/simulation/mutations.py``) reaches the decision itself, not a private step around it:

* :func:`holds_lease` - a write under a lease token still holds the group;
* :func:`ran_before` - where a key ran before, in the state's keys or this process's memory;
* :func:`outlived` - which numbers of a fenced run must be named in an ALERT;
* :func:`batch_failure` - a batch handler's failure: wait (``RetryLater``) or narrow it down;
* :func:`poison_verdict` - past the attempts limit: skip the message, or block the group;
* :func:`poison_pending` - a verdict taken but not recorded: applied again, never run again;
* :func:`restart_verdict` - a newer counter epoch: restart now, settle the old copies, or wait;
* :func:`older_verdict` - a late copy of an earlier sequence: duplicate, reused or ended;
* :func:`stray_of_earlier_sequence` - a copy stored at a number in an earlier sequence;
* :func:`gap_started`, :func:`gap_expired`, :func:`gap_skipped` - the gap policy: when a head
  counts as missing, and the state that passes over the missing numbers.

(The state transitions themselves are :mod:`.fifo_rules`.)
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TypeVar

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.core import fifo_rules as rules
from pubsub_toolkit.core.fifo_policy import PoisonPolicy
from pubsub_toolkit.errors import RetryLater, StaleClaimError
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.fifo_state.base import GroupState, Range, merge_ranges

T = TypeVar("T")


def holds_lease(state: GroupState, token: int) -> bool:
    """True when ``state`` is still under lease ``token`` (the run's own token, as a repair of
    a store loss may have moved it): only then may the run write its change. A record under
    another token belongs to whoever took the group over - an advance written there would
    move the new holder's group under it."""
    return state.lease_token == token


# Where this process saw a key run in a group: (group, state, seq, message) -> the number.
Remembered = Callable[[str, GroupState, int, Message], int | None]


def ran_before(
    group: str, state: GroupState, seq: int, message: Message, remembered: Remembered
) -> int | None:
    """The lower number at which ``message``'s key already ran in ``group`` (:func:`.fifo_rules.
    ran_earlier`), or - further back than the state's last keys - where this process saw it
    run (``remembered``, asked only then): a producer's retry renumbered far from its first
    copy is filled, not run again. (The memory is passed with its arguments apart, not as a
    closure: this runs on every delivery.)"""
    found = rules.ran_earlier(state, seq, message)
    if found is None:
        found = remembered(group, state, seq, message)
    return found


def outlived(steps: Sequence[T], exc: BaseException) -> tuple[T, ...]:
    """The steps of a run that ended with ``exc`` to name in a ``lease_outlived`` ALERT: all of
    them when the run was fenced (:class:`StaleClaimError` - it outlived its lease and another
    worker took the group over, or an operator skipped it): they ran here and may run again
    elsewhere. None for a store failure: the lease may still be ours."""
    return tuple(steps) if isinstance(exc, StaleClaimError) else ()


class BatchFailure(enum.StrEnum):
    """What a batch handler's failure means for the batch (see :func:`batch_failure`)."""

    WAIT = "wait"  # the handler asked to retry later: the head waits the delay, the rest parked
    ONE_BY_ONE = "one_by_one"  # run the numbers again one at a time, to find the failing one


def batch_failure(exc: BaseException) -> BatchFailure:
    """A :class:`RetryLater` from a batch handler is its decision for the whole batch: the head
    waits the delay (a counted attempt) - running the numbers again one by one at once would
    ignore it. Any other failure is narrowed down one number at a time, so a poison message
    is found alone and its neighbours are not blamed."""
    return BatchFailure.WAIT if isinstance(exc, RetryLater) else BatchFailure.ONE_BY_ONE


class PoisonVerdict(enum.StrEnum):
    """What becomes of a head that failed ``max_attempts`` times (see :func:`poison_verdict`)."""

    SKIP = "skip"  # dead-lettered and passed over with a tombstone; the group goes on
    BLOCK = "block"  # kept parked and the group stopped (dead-lettered too, if it can be)


def poison_verdict(poison: PoisonPolicy, *, dead_letters: bool) -> PoisonVerdict:
    """The poison policy applied: ``SKIP`` passes over the message only when a dead-letter topic
    keeps it - skipping without one would lose it silently, so the group blocks instead."""
    if dead_letters and poison is PoisonPolicy.SKIP:
        return PoisonVerdict.SKIP
    return PoisonVerdict.BLOCK


def poison_pending(state: GroupState, max_attempts: int) -> bool:
    """True when the head's failures already reached the limit: a run found it poison and
    failed before its verdict was recorded (its dead letter unconfirmed - a publish that timed
    out may have landed - or the write after it). The verdict stands: a later run applies it
    again and never calls the handler (seed 232256). A recorded verdict resets the attempts
    (skipped) or blocks the group; an operator's replay gives fresh ones."""
    return state.attempts >= max_attempts


def stray_of_earlier_sequence(state: GroupState, stored: Message) -> bool:
    """True when ``stored``, a copy found at a number of the group, was numbered in an earlier
    sequence that ``state`` saw end (:func:`.fifo_rules.restarted` settled every copy it listed
    then): an unlisted leftover, holding no number of the new sequence. A copy without an epoch,
    or of a sequence the record does not know (lost with it), cannot be told apart: it holds
    its number."""
    epoch = rules.message_epoch(stored)
    return epoch is not None and epoch < state.epoch and any(e == epoch for e, _ in state.prior)


class RestartVerdict(enum.StrEnum):
    """What a delivery of a newer counter epoch does to the group (see :func:`restart_verdict`)."""

    RUNNING = "running"  # a number of the old sequence runs: the new one waits (nack)
    HEAD_PARKED = "head_parked"  # the old head waits parked: it runs first (nack)
    SETTLE = "settle"  # copies parked behind a gap: dead-letter them, then restart
    RESTART = "restart"  # nothing of the old sequence is left: restart now


def restart_verdict(
    state: GroupState, *, now: datetime, held_idle: bool, running_here: bool
) -> RestartVerdict:
    """Whether the group's sequence may start again now (``held_idle``: this process holds the
    lease idle between deliveries, no run under it; ``running_here``: it runs one of the
    group's numbers now, past its lease too). A run under way finishes first - a restart would
    refuse its advance. A head waiting parked (backing off, or not yet swept) runs first too:
    it and the parked run after it were published before the new counter began, and dropping
    them would lose messages that can still run. A head blocked as poison is on the dead-letter
    topic already (or, without one, waits for an operator while the settle keeps it)."""
    if (state.lease_live(now) and not held_idle) or running_here:
        return RestartVerdict.RUNNING
    if state.head in state.parked and state.blocked_at is None:
        return RestartVerdict.HEAD_PARKED
    if state.parked:
        return RestartVerdict.SETTLE
    return RestartVerdict.RESTART


class OlderVerdict(enum.StrEnum):
    """A late copy of an earlier sequence of the group (see :func:`older_verdict`)."""

    DUPLICATE = "duplicate"  # its sequence passed its number with it (or a filler): ack it
    REUSED = "reused"  # another key ran at its number: dead-lettered fifo_sequence_reused
    ENDED = "ended"  # its sequence ended before its number: dead-lettered, it never runs


def older_verdict(state: GroupState, epoch: int, seq: int, message: Message) -> OlderVerdict:
    """``message`` at ``seq`` of the earlier sequence ``epoch``: a duplicate if that sequence
    passed the number - unless the record holds another key there (a producer reused the
    number: this message never ran, and acking it as a redelivery would lose it silently) -
    else a number of a sequence that ended before it ran."""
    if attr.is_filler(message):
        return OlderVerdict.DUPLICATE
    if rules.ran_in_prior(state, epoch, seq):
        if rules.taken_in_prior(state, epoch, seq, message):
            return OlderVerdict.REUSED
        return OlderVerdict.DUPLICATE
    return OlderVerdict.ENDED


def gap_started(state: GroupState) -> datetime | None:
    """When the head began to count as missing: ``gap_since``, or the end of a lease taken on
    the group since, whichever is later (None: no gap). A head that arrived and ran under a
    lease is not missing while the lease lasts, and past it - its run outlived the lease, or
    its process died - it waits a whole gap timeout for that run or its redelivery: counted
    from the later park, a gap older than the timeout passed over a number still running
    (seed 103165: its effect after its successors', its redelivery dead-lettered
    ``fifo_late_after_skip``)."""
    if state.gap_since is None:
        return None
    if state.lease_until is None:
        return state.gap_since
    return max(state.gap_since, state.lease_until)


def gap_expired(state: GroupState, *, now: datetime, timeout: timedelta) -> bool:
    since = gap_started(state)
    return since is not None and now - since >= timeout


def gap_skipped(state: GroupState) -> tuple[Range, GroupState]:
    """The missing numbers before the first parked one, as one ``(first, last)`` range, and
    the state that passes over them with tombstones (the parked ones are still to run).

    A range, never the numbers one by one: a producer numbering by hand may leave a gap of
    up to 2**53 numbers (1, then 9007199254740991), which listed would not fit in memory.
    """
    missing = (state.head, min(state.parked) - 1)
    new = state.advanced_to(missing[1])
    return missing, replace(
        new, parked=state.parked, skipped=merge_ranges((*new.skipped, missing), ())
    )
