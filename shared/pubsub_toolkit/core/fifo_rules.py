"""The FIFO gate's rules: every state transition and verdict, as pure
functions of a group's :class:`~pubsub_toolkit.stores.fifo_state.base.GroupState` (no store, no
clock, no I/O) - the counterpart of :mod:`pubsub_toolkit.stores.dedup.rules` for dedup.

:mod:`.fifo_gate` orchestrates (its policies and outcomes are :mod:`.fifo_policy`): it reads the
state, asks these functions for the next one and writes it with a compare-and-set under the
group's lease. The transitions (``seq`` is the number in hand, ``head`` the one awaited):

* :func:`leased` - take the group to run its head, recording which message runs there;
* :func:`with_arrival_parked` - keep an early (or blocked, or in-progress) copy;
* :func:`advanced` - past ``seq`` once its effect happened (or it was skipped or filled);
* :func:`failure_counted`, :func:`retry_later`, :func:`blocked` - a failed handler run
  (:func:`counts_as_attempt` and :func:`next_attempt_at` say whether it counts and when the
  next attempt is: the backoff, or a handler's ``RetryLater`` delay);
* :func:`operator_skipped`, :func:`replayed` - an operator's ``fifo skip`` / ``fifo replay``;
* :func:`without_lost_parked`, :func:`repaired` - what a store that lost writes handed back;
* :func:`ended`, :func:`after_end`, :func:`without_after_end` - the end of a group: the number
  marked ``fifo_end`` behind it, the group is complete, its record a tombstone that expires,
  and a later number is refused (``fifo_after_end``) unless it is a copy of a message that ran;
* :func:`message_epoch`, :func:`restarted`, :func:`ran_in_prior`, :func:`taken_in_prior` - the
  counter's epochs: a newer one starts the group's sequence again, a copy of an older one is a
  duplicate if its sequence passed it (dead-lettered ``fifo_sequence_reused`` if another key ran
  at its number), else dead-lettered (``fifo_sequence_restarted``).

The verdicts a run takes on those states (poison, a batch's failure, a counter restart, a fenced
run, a gap...) are :mod:`.fifo_verdicts`. (About 490 lines: one small function per state change
the gate makes, in one module so that every rule over a ``GroupState`` is read side by side.)
"""

from __future__ import annotations

import enum
from dataclasses import replace
from datetime import datetime, timedelta

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.attributes import FIFO_EPOCH
from pubsub_toolkit.config import DEFAULT_TTL_SECONDS
from pubsub_toolkit.core.fifo_policy import GatePolicy, message_key
from pubsub_toolkit.errors import PermanentError, RedeliveryRequested, RetryLater, TransientError
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.fifo_state.base import (
    KEY_WINDOW,
    POISON_MARK,
    GroupState,
    key_digest,
    merge_ranges,
    needs_attention,
    plain_digest,
)

# Earlier sequences (epochs) a record remembers the position of, to tell their late copies.
PRIOR_SEQUENCES = 16
_MAX_EPOCH_DIGITS = 18  # microseconds: until the year 33658


def went_back(seen: GroupState, state: GroupState, *, now: datetime) -> bool:
    """True when ``state`` is older than what this process saw: positions never go back, and a
    parked number only leaves the list when the group moves past it. A complete group whose
    record has expired is gone by design (its tombstone outlived the redelivery window), not
    lost: that is no going back."""
    if seen.expired(now):
        return False
    if other_sequence(seen, state):
        # A newer sequence that began from this one is no going back; one that began on a
        # record that had lost this one (the store lost it, then a process adopted the new
        # epoch on the empty record) is: this process still knows what ran there.
        return state.epoch < seen.epoch or not succeeds(state, seen)
    # Copies parked past a complete group's end leave the list too: whichever process ended
    # the group settles them (dead-lettered, or dropped as duplicates) - seed 1997, fifo_end -
    # and leaves their numbers skipped. One the end never listed was lost by the store.
    lost_parked = any(
        s > state.last_processed and s not in state.parked and not settled_past_end(state, s)
        for s in seen.parked
    )
    return (
        state.last_processed < seen.last_processed
        or state.lease_token < seen.lease_token
        or lost_parked
        or rewritten_number(seen, state) is not None
    )


def settled_past_end(state: GroupState, seq: int) -> bool:
    """True when ``seq``, past the end of complete ``state``, was parked there and settled
    (:func:`without_after_end` leaves it skipped): its copy was dead-lettered or dropped."""
    return state.complete and seq > state.last_processed and state.is_skipped(seq)


def other_sequence(seen: GroupState, state: GroupState) -> bool:
    """True when ``state`` is in another sequence than the one ``seen`` recorded, so their
    numbers are not the same numbers: another epoch - or, when this process saw the record
    before it had one, a record that has adopted an epoch AND started again since (its
    ``prior``). An adoption alone keeps the position; a restart begins again at 0, which a
    comparison by number would take for a loss - and its repair would mark the new sequence's
    numbers as run (seed 1113: a new #1 acked as a duplicate, never handled)."""
    return state.epoch != seen.epoch and bool(seen.epoch or state.prior)


def succeeds(state: GroupState, seen: GroupState) -> bool:
    """True when ``state``'s sequence began after ``seen``'s had reached where it is now (a
    ``seen`` without an epoch was adopted by some sequence of ``state.prior``: any may be it)."""
    ran = seen.last_processed
    mine = [last for e, last in state.prior if e == seen.epoch or not seen.epoch]
    return not (ran or seen.keys) or any(last >= ran for last in mine)


def rewritten_number(seen: GroupState, state: GroupState) -> int | None:
    """A number both passed where the store records only other messages than the one this
    process saw there: the store lost that run and the number went to another message (its
    counter rolled back too). The position alone cannot show it - the reissue brought it back
    to where it was - but the run this process remembers must still count (``ran_earlier``)."""
    if other_sequence(seen, state):
        return None  # other sequences: their numbers are not the same numbers
    if seen.keys == state.keys:
        return None  # each key seen is the store's at its number (the usual read: one compare)
    passed = min(seen.last_processed, state.last_processed)
    # The store's keys by number, built once: a set per number for each of ``seen``'s keys was
    # quadratic in the window (64 x 64 per read), the hottest line of an in-order delivery.
    theirs: dict[int, set[str]] = {}
    for seq, digest in state.keys:
        if seq <= passed:
            theirs.setdefault(seq, set()).add(plain_digest(digest))
    if not theirs:
        return None
    for seq, digest in seen.keys:
        there = theirs.get(seq)
        if there and plain_digest(digest) not in there:
            return seq
    return None


def ran_earlier(state: GroupState, seq: int, message: Message) -> int | None:
    """The lower number at which the same dedup key already ran in this group, if any.

    A copy renumbered by the producer's retry (or re-routed by ingress after a crash) must not
    run twice: the lowest number holding the key is its place in the order, later ones are
    fillers. That place counts also when the message was dead-lettered there as poison (its
    digest carries POISON_MARK): a renumbered copy must not run after its own dead letter.
    Fillers themselves never count.
    """
    key = message_key(message)
    if attr.is_filler(message) or not key:  # no identity to compare (a hand-made test message)
        return None
    digest = key_digest(key)
    last = state.last_processed
    # A filler's digest carries FILLER_MARK, so it never equals a plain one: no message ran there.
    taken = (digest, POISON_MARK + digest)
    return next((s for s, d in state.keys if d in taken and s < seq and s <= last), None)


class EndVerdict(enum.StrEnum):
    """What a delivery numbered past a group's end is (see :func:`after_end`)."""

    OPEN = "open"  # not past an end: the usual rules decide
    DUPLICATE = "duplicate"  # a renumbered copy of a message that already ran: ack it
    FILLER = "filler"  # a filler: it carries no message, there is nothing to keep
    REFUSED = "refused"  # a new message after the end: dead-letter it (REASON_AFTER_END)


def after_end(state: GroupState, seq: int, message: Message) -> EndVerdict:
    """How the gate treats ``seq`` of a group that may be complete.

    Only a number *past* the end is special (one at or before it is decided as in any group).
    There a producer's retry that the counter numbered again (the end message's publish timed
    out although Pub/Sub had it) is the same message - a duplicate, acked. Only a message that
    never ran is a producer's error, dead-lettered rather than parked for a turn never to come.
    """
    if not state.complete or seq <= state.last_processed:
        return EndVerdict.OPEN
    if ran_earlier(state, seq, message) is not None:
        return EndVerdict.DUPLICATE
    if attr.is_filler(message):
        return EndVerdict.FILLER
    return EndVerdict.REFUSED


# --- transitions ----------------------------------------------------------------------------


def leased(state: GroupState, digest: str, *, now: datetime, lease: timedelta) -> GroupState:
    """The head leased to run: a new fencing token, and the running message's key recorded
    now, so a DIFFERENT message arriving at this number while it runs is refused at once."""
    return replace(
        state.with_key(state.head, digest),
        lease_token=state.lease_token + 1,
        lease_until=now + lease,
    )


def with_arrival_parked(state: GroupState, seq: int, digest: str, *, now: datetime) -> GroupState:
    """``seq``'s copy parked; an early one starts the gap clock unless the head waits parked."""
    new = state.with_parked(seq, digest)
    if seq > state.head and new.gap_since is None and state.head not in state.parked:
        new = replace(new, gap_since=now)
    return new


def advanced(
    state: GroupState,
    seq: int,
    *,
    skipped: tuple[int, ...],
    digest: str | None,
    now: datetime,
    lease: timedelta,
    end: bool = False,
    retention: timedelta = timedelta(seconds=DEFAULT_TTL_SECONDS),
    hold: bool = False,
) -> GroupState:
    """Past ``seq``; the lease renewed while a parked successor is ready to run next, or when
    this worker ``hold``s it for the group's next delivery - unless ``seq`` was the group's
    marked end (``end``): then the group is complete (:func:`ended`)."""
    new = state.advanced_to(seq, skipped=skipped, digest=digest)
    if end:
        return ended(new, now=now, retention=retention)
    if new.parked and new.head not in new.parked:
        new = replace(new, gap_since=now)
    if new.head in new.parked or (hold and not new.parked):
        # Renewed, not kept: a long backlog must not outlive the lease it started with. (Not
        # held over a gap: an operator may have to skip the missing head, and a live lease
        # would refuse that.)
        return replace(new, lease_until=now + lease)
    return new


def dated(state: GroupState, *, now: datetime, retention: timedelta) -> GroupState:
    """``state`` as saved: an idle group's record expires ``retention`` after this change, one
    that needs attention never does, a complete group's tombstone keeps its date."""
    if state.complete:
        return state
    return replace(state, expire_at=None if needs_attention(state) else now + retention)


def forgotten_after_expiry(
    state: GroupState, message: Message, *, now: datetime, retention: timedelta
) -> bool:
    """True when ``message`` may belong to a group whose record expired: there is no record,
    and it was published more than ``retention`` ago. Anything this group processed before
    its record expired was published before that (the record outlives the last change by
    ``retention``), so such a delivery is kept on the dead-letter topic, never run again; a
    new message of the group is published after the expiry and passes."""
    if state.version is not None or message.publish_time is None:
        return False
    return message.publish_time < now - retention


def ended(state: GroupState, *, now: datetime, retention: timedelta) -> GroupState:
    """The group complete at ``state.last_processed`` (its marked end, just passed): the lease
    freed and no gap clock - nothing will run here again - and the record a tombstone until
    ``now + retention``. Numbers parked past the end stay listed until the gate has dead-
    lettered them (:func:`without_after_end`), so a crash in between loses none."""
    return replace(
        state,
        end_seq=state.last_processed,
        expire_at=now + retention,
        lease_until=None,
        gap_since=None,
    )


def without_after_end(state: GroupState, seqs: tuple[int, ...]) -> GroupState:
    """A complete group with ``seqs`` (parked past its end, now settled) no longer listed, nor
    their keys: such a number never becomes the group's, so a later delivery of it is judged
    afresh by :func:`after_end`, not as a reuse of the number. Each stays among the skipped
    numbers: the mark of a settled copy (:func:`settled_past_end`), so a process that parked
    one tells its settling from a store that lost the park before the end ran (then nothing
    settled it, and that process still holds the only copy: see :func:`went_back`)."""
    gone = set(seqs)
    return replace(
        state,
        parked=tuple(s for s in state.parked if s not in gone),
        keys=tuple((s, d) for s, d in state.keys if s not in gone),
        skipped=merge_ranges(state.skipped, tuple(sorted(gone))),
    )


def lease_released(state: GroupState) -> GroupState:
    return replace(state, lease_until=None)


def counts_as_attempt(exc: BaseException) -> bool:
    """A failure counts toward poison unless it is transient ("not my fault, try later"); a
    :class:`RetryLater` or a handler's own nack (:class:`RedeliveryRequested`) is the handler's
    decision and counts, or a group could wait forever."""
    return isinstance(exc, RetryLater | RedeliveryRequested) or not isinstance(exc, TransientError)


def poison_at_once(exc: BaseException) -> bool:
    """A handler's :class:`PermanentError` says the message can never succeed: it is poison
    on this attempt (its policy applies), not after ``max_attempts`` backed-off retries."""
    return isinstance(exc, PermanentError)


def next_attempt_at(
    policy: GatePolicy, attempts: int, *, now: datetime, exc: BaseException
) -> datetime:
    """When a failed head may run again: exactly the delay a :class:`RetryLater` asked for,
    else the policy's exponential backoff after ``attempts`` failures."""
    if isinstance(exc, RetryLater):
        return now + exc.delay
    return now + policy.backoff(max(attempts, 1))


def failure_counted(state: GroupState, *, counts: bool) -> GroupState:
    """One more failed attempt at the head, unless the failure does not count (transient)."""
    return replace(state, attempts=state.attempts + 1 if counts else state.attempts)


def retry_later(state: GroupState, seq: int, digest: str, *, at: datetime) -> GroupState:
    """A failed head kept parked, the lease freed, the next attempt not before ``at``."""
    return replace(state.with_parked(seq, digest), lease_until=None, next_attempt_at=at)


def blocked(state: GroupState, seq: int, digest: str) -> GroupState:
    """A poison head kept parked and the group stopped until an operator acts."""
    return replace(state.with_parked(seq, digest), blocked_at=seq, lease_until=None)


def operator_skipped(
    state: GroupState,
    seq: int,
    *,
    end: bool = False,
    now: datetime | None = None,
    retention: timedelta = timedelta(seconds=DEFAULT_TTL_SECONDS),
) -> GroupState:
    """``seq`` passed over with a tombstone; a new lease token fences any worker that still
    thinks it runs this number. Skipping the marked end (``end``, at ``now``) completes the
    group all the same: the producer's numbers stop there whatever became of the message."""
    new = replace(state.advanced_to(seq, skipped=(seq,)), lease_token=state.lease_token + 1)
    if end:
        if now is None:
            raise ValueError("skipping a group's end needs now= to date its tombstone")
        return ended(new, now=now, retention=retention)
    return new


def replayed(state: GroupState) -> GroupState:
    """Unblocked, with fresh attempts for the parked head."""
    return replace(state, blocked_at=None, attempts=0, next_attempt_at=None)


def without_lost_parked(state: GroupState, seq: int) -> GroupState:
    """``seq`` no longer listed as parked (listed, but its copy is not stored)."""
    return replace(state, parked=tuple(p for p in state.parked if p != seq))


def lost_parked(seen: GroupState, state: GroupState) -> list[int]:
    """Numbers this process saw parked ahead of the group that the store no longer lists."""
    if other_sequence(seen, state):
        return [s for s in seen.parked if s > seen.last_processed]
    last = max(seen.last_processed, state.last_processed)
    return [
        s
        for s in seen.parked
        if s > last and s not in state.parked and not settled_past_end(state, s)
    ]


def repaired(
    seen: GroupState, state: GroupState, *, restored: list[int], now: datetime
) -> GroupState:
    """The group put back where this process saw it (``seen``) after the store handed back an
    older ``state``: every lease fenced, ``restored`` parked again. (A store that lost the
    start of this process's newer sequence gets that sequence back as this process saw it.)"""
    fenced = max(seen.lease_token, state.lease_token) + 1
    if other_sequence(seen, state) and state.epoch > seen.epoch:
        # The store's new sequence began on a record that had lost this one: it keeps going,
        # and learns this one's position and last keys (a renumbered retry of one is known).
        carried = restarted(seen, state.epoch)
        positions = dict(sorted([*carried.prior, *state.prior], key=lambda p: p[1]))
        return replace(
            state,
            prior=tuple(sorted(positions.items(), reverse=True))[:PRIOR_SEQUENCES],
            keys=tuple(sorted({*state.keys, *carried.keys})),
            lease_token=fenced,
            lease_until=None,
        )
    if seen.epoch and seen.epoch != state.epoch:
        parked = tuple(sorted(restored))
        return replace(
            seen,
            parked=parked,
            gap_since=now if parked and seen.head not in parked else None,
            lease_token=max(seen.lease_token, state.lease_token) + 1,
            lease_until=None,
        )
    last = max(seen.last_processed, state.last_processed)
    parked = tuple(sorted({*(s for s in state.parked if s > last), *restored}))
    return replace(
        state,
        last_processed=last,
        parked=parked,
        gap_since=now if parked and last + 1 not in parked else None,
        lease_token=max(seen.lease_token, state.lease_token) + 1,
        lease_until=None,
        # The head may have moved: its attempts and backoff belong to the old one.
        attempts=state.attempts if last == state.last_processed else 0,
        next_attempt_at=state.next_attempt_at if last == state.last_processed else None,
        blocked_at=state.blocked_at if last == state.last_processed else None,
        skipped=merge_ranges((*seen.skipped, *state.skipped), ()),
        keys=merged_keys(seen, state),
        # A completion the store lost is this process's word too: the end stays an end.
        end_seq=seen.end_seq if seen.complete and seen.last_processed == last else state.end_seq,
        expire_at=seen.expire_at
        if seen.complete and seen.last_processed == last
        else state.expire_at,
    )


def merged_keys(seen: GroupState, state: GroupState) -> tuple[tuple[int, str], ...]:
    """The keys of a repaired group: this process's, and the store's it does not contradict.

    Where both record a passed number with different messages, both ran there (the lost run,
    and the reissued number's): both stay, so a renumbered copy of either is a duplicate - and
    the next process to compare finds nothing rewritten (no repair ping-pong between two
    witnesses). Elsewhere this process's word comes first: it saw what really ran there."""
    mine = {(s, plain_digest(d)) for s, d in seen.keys}
    passed = min(seen.last_processed, state.last_processed)
    numbers = {s for s, _ in seen.keys}
    theirs = [
        (s, d)
        for s, d in state.keys
        if (s not in numbers or s <= passed) and (s, plain_digest(d)) not in mine
    ]
    return tuple(sorted({*seen.keys, *theirs}))


# --- epochs (see pubsub_toolkit.stores.counters.base) ---------------------------------------


def message_epoch(message: Message) -> int | None:
    """The counter epoch ``message`` was numbered in; None when it carries none (a counter
    without epochs, a filler, a hand-made message) - or a malformed one (the caller logs it):
    then no epoch rule applies, as before epochs."""
    raw = message.attributes.get(FIFO_EPOCH)
    if raw is None or not (raw.isascii() and raw.isdigit()) or len(raw) > _MAX_EPOCH_DIGITS:
        return None
    return int(raw)


def same_sequence(state: GroupState, message: Message) -> bool:
    """True when no epoch rule separates ``message`` from the group's sequence."""
    epoch = message_epoch(message)
    return epoch is None or epoch == state.epoch


def restarted(state: GroupState, epoch: int) -> GroupState:
    """The group's sequence begun again in ``epoch`` (its counter started again at 1): the old
    position remembered in ``prior``, the fencing token still growing, and the keys that ran
    at the old sequence's last numbers kept at the numbers before 1 (the last at 0, and down
    from there), so a producer's retry of one of them renumbered in the new sequence is still
    recognised (:func:`ran_earlier`): the window of recent keys runs on across the restart."""
    prior = ((state.epoch, state.last_processed), *state.prior)[:PRIOR_SEQUENCES]
    last = state.last_processed
    return GroupState(
        epoch=epoch,
        prior=prior,
        lease_token=state.lease_token + 1,
        keys=tuple(sorted((s - last, d) for s, d in state.keys if last - KEY_WINDOW < s <= last)),
        version=state.version,
    )


def ran_in_prior(state: GroupState, epoch: int, seq: int) -> bool:
    """True when ``seq`` of the earlier sequence ``epoch`` is behind that sequence's end."""
    return any(e == epoch and seq <= last for e, last in state.prior)


def taken_in_prior(state: GroupState, epoch: int, seq: int, message: Message) -> bool:
    """True when the record holds another key at ``seq`` of the sequence just before this one
    (``epoch``; :func:`restarted` keeps its last keys at the numbers up to 0) and not
    ``message``'s: another message ran at that number (a producer reused it), so ``message``
    is no redelivery of what ran there - the same rule as within a sequence."""
    if not state.prior or state.prior[0][0] != epoch or not message_key(message):
        return False
    at = seq - state.prior[0][1]
    there = {plain_digest(d) for s, d in state.keys if s == at}
    return bool(there) and key_digest(message_key(message)) not in there
