"""The FIFO store as one gate process has seen it: every read checked against what this process
wrote, and a group the store handed back older repaired (see :mod:`pubsub_toolkit._witness`).

A store can lose acknowledged writes (a Redis failover, a restored backup): ``last_processed``
going back would run messages twice. :class:`SeenStore` remembers the newest state this process
read or wrote per group, and the messages it parked; when a read goes back
(:func:`~.fifo_rules.went_back`) it writes the group back where it was
(:func:`~.fifo_rules.repaired`), parks again the copies it still has, says with an ALERT what
it could not restore, and keeps - as reused numbers - copies parked at numbers the group had
already passed. The gate's core (:mod:`.fifo_gate`) reads and writes only through it, by the
effects it yields (:mod:`.fifo_effects`): this module performs no I/O.

A copy parked in a sequence the store lost altogether (its counter restarted with it, and a new
sequence began on the empty record) can never run: it is kept as ``fifo_after_end`` when this
process saw that sequence end before it, else as ``fifo_sequence_restarted`` - all this process
can know (another process may have run it, or ended the group before it, and dead-lettered it
then: the gate's dead letters are once per copy, whatever the reason). Each copy is kept once
per process: a repair whose save is refused does not keep (or hand over) it again.

The repair fences every lease - except the live one this process took itself for a run still
under way: that run's lease moves to the repaired record under a new token (:meth:`SeenStore.
lease_now`), so its advance is recorded, not refused, and the message does not run twice.

(About 380 lines: the repair and what it does with each kind of lost copy belong together, so
that one module shows every way a store loss is answered; the decisions themselves are pure
functions in :mod:`.fifo_rules`.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from pubsub_toolkit._witness import Witness
from pubsub_toolkit.attributes import FIFO_EPOCH
from pubsub_toolkit.clock import Clock
from pubsub_toolkit.core import fifo_rules as rules
from pubsub_toolkit.core.fifo_alerts import hand_over, rollback_text
from pubsub_toolkit.core.fifo_effects import (
    MAX_CAS_ROUNDS,
    Decide,
    Groups,
    Load,
    Op,
    Park,
    ParkedMessage,
    Save,
    Unpark,
)
from pubsub_toolkit.core.fifo_policy import REASON_SEQUENCE_RESTARTED, message_key
from pubsub_toolkit.core.fifo_ran_keys import RanKeys
from pubsub_toolkit.errors import PermanentError, TransientError
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.fifo_state.base import GroupState, key_digest, needs_attention

PARKED_COPIES = 1_000  # parked messages remembered per gate, to re-park after a store loss

# A copy parked at a number the group already passed: the gate dead-letters it as reused.
KeepReissued = Callable[[Message, str, int, GroupState], Op[object]]
# A copy parked past the end of a complete group (the state given): settled as after the end.
KeepPastEnd = Callable[[Message, str, int, GroupState], Op[None]]
# The gate's dead-lettering: (message, group, seq, reason, detail), once per copy.
DeadLetter = Callable[[Message, str, int, str, str], Op[None]]


def _no_keep(copy: Message, group: str, seq: int, state: GroupState) -> Op[None]:
    """Until :meth:`SeenStore.on_past_end` names the handler: nothing to do."""
    return
    yield  # a generator


class SeenStore:
    """The store of one consumer as this process has seen it: its memory of each group, and
    the generators that read and write the store through it (they yield the store's effects,
    :mod:`.fifo_effects`)."""

    def __init__(
        self,
        consumer: str,
        clock: Clock,
        *,
        decide: Decide,
        keep_reissued: KeepReissued,
        dead_letter: DeadLetter,
        date: Callable[[GroupState], GroupState] = lambda state: state,
        held: Callable[[str], bool] = lambda group: False,
    ) -> None:
        """``date`` stamps every state before it is written (the gate's idle-record expiry);
        ``held``: this process holds a group's lease idle (no run under it: a repair fences it)."""
        self._date = date
        self._held = held
        self._consumer = consumer
        self._clock = clock
        self._decide = decide
        self._keep_reissued = keep_reissued
        self._dead_letter = dead_letter
        self._witness: Witness[str, GroupState] = Witness()
        # The messages this process parked: a store that loses them can be given them back.
        self._parked_copies: Witness[tuple[str, int], Message] = Witness(PARKED_COPIES)
        # The copies a repair kept (dead-lettered or handed over), by (group, seq, identity):
        # a repair whose save was refused runs again, and must not keep them again.
        self._kept: Witness[tuple[str, int, str], bool] = Witness(PARKED_COPIES)
        # The lease token this process last took per group, and the token a repair moved a live
        # one of them to (a run that holds the first goes on under the second).
        self._own_leases: Witness[str, int] = Witness()
        self._moved_leases: Witness[tuple[str, int], int] = Witness()
        self.ran = RanKeys()  # keys seen processed, beyond the state's window
        self._keep_past_end: KeepPastEnd = _no_keep  # until on_past_end names the handler

    def on_past_end(self, keep: KeepPastEnd) -> None:
        """How a repair keeps a copy parked past the end of the complete group this process saw,
        when the store's new sequence began on a record that had lost it (the group's end
        handler, :mod:`.fifo_end`: ``fifo_after_end``, not a number given again)."""
        self._keep_past_end = keep

    def groups(self) -> Op[list[str]]:
        """The groups the store lists (those needing attention) - and those this process saw
        needing attention, so a group the store lost altogether is still swept (and so
        repaired, see :meth:`load`). Idle groups are not visited: a sweep costs O(groups with
        work), and a lost idle group is repaired by its next delivery's read."""
        now = self._clock.now()
        listed: list[str] = yield Groups(self._consumer)
        remembered = (
            group
            for group, seen in self._witness.items()
            if needs_attention(seen) and not seen.expired(now)
        )
        return sorted({*listed, *remembered})

    def remember_parked(self, group: str, seq: int, message: Message) -> None:
        self._parked_copies.put((group, seq), message)

    def park_run(self, group: str, seq: int, message: Message) -> Op[bool]:
        """Park a copy whose run under ``seq``'s lease failed: the state names it there, so any
        other copy kept there is a stray (seed 843: a repair's re-park) - it would run instead.

        True when the stray was a copy of an earlier sequence of the group (an older epoch):
        the run that passed that number unparks it after its advance, so it may still unpark
        the number - and take this copy with it (seed 160824)."""
        yield Park(self._consumer, group, seq, message)
        stored = yield ParkedMessage(self._consumer, group, seq)
        displaced = False
        if stored is not None and message_key(stored) != message_key(message):
            older, own = rules.message_epoch(stored), rules.message_epoch(message)
            displaced = older is not None and own is not None and older < own
            yield Unpark(self._consumer, group, seq)
            yield Park(self._consumer, group, seq, message)
        self.remember_parked(group, seq, message)
        return displaced

    def parked(self, group: str, state: GroupState, seq: int) -> Op[Message | None]:
        """The copy to run at ``seq``: the stored one if it is the message ``state`` lists there,
        else this process's own copy of that one, parked again (the store lost it, or a stray -
        a crash before an unpark - holds the number); else None (a stray is unparked)."""
        listed = state.key_of(seq)
        stored: Message | None = yield ParkedMessage(self._consumer, group, seq)
        if stored is not None and listed in (None, key_digest(message_key(stored))):
            return stored
        if stored is not None:
            yield Unpark(self._consumer, group, seq)
        copy = self._parked_copies.get((group, seq))
        if copy is None or listed not in (None, key_digest(message_key(copy))):
            return None
        yield Park(self._consumer, group, seq, copy)
        return copy

    def load(self, group: str) -> Op[GroupState]:
        """The group's state; one older than this process saw is repaired first."""
        for _ in range(MAX_CAS_ROUNDS):
            # What this process had seen BEFORE the read: another thread of it may write (and
            # remember) a newer state while this read is under way, which is no loss...
            seen = self._witness.get(group)
            state: GroupState = yield Load(self._consumer, group)
            now = self._clock.now()
            if seen is not None and seen.expired(now):
                # A complete group's tombstone, gone by design after its retention: whatever the
                # store holds now is the group (no repair, and no stale memory kept of it).
                self._witness.put(group, state)
                return state
            if seen is None or not rules.went_back(seen, state, now=now):
                moved = self._witness.get(group)
                if (
                    moved is not seen
                    and moved is not None
                    and rules.went_back(moved, state, now=now)
                ):
                    # ...but that write may also be what the store lost since: read again,
                    # now against it, to tell a read from before it from a loss of it.
                    continue
                return self.witnessed(state, group)
            if self._witness.get(group) is not seen:
                # ...and the other way round: a sibling wrote meanwhile - a repair, say, which
                # drops the parked numbers it could not restore and moves this process's own
                # live lease to a new token. Judged against the memory from before it, its
                # state looks lost: a second repair would fence that run (seed 55719). Read
                # again, against what the process has seen since.
                continue
            # Repaired or not, read again - and check that read too: the store may lose the
            # repair itself (another loss right after it), and an unchecked re-read would then
            # hand the gate the old position (a number run twice on this very process).
            yield from self._repair(group, seen, state)
        raise TransientError(f"{self._consumer}/{group}: could not repair the group's state")

    def save(self, group: str, state: GroupState, expected: GroupState) -> Op[GroupState | None]:
        """``state`` as stored (with its new version), or None if ``expected`` was stale."""
        stored = yield Save(self._consumer, group, self._date(state), expected)
        if stored is None:
            return None
        if stored.lease_token != expected.lease_token and stored.lease_until is not None:
            self._own_leases.put(group, stored.lease_token)  # a lease this process took
        return self.witnessed(stored, group)

    def lease_now(self, group: str, token: int) -> int:
        """The token a run that took lease ``token`` holds now: the same, unless a repair of
        a store loss moved the lease (see the module docstring)."""
        for _ in range(MAX_CAS_ROUNDS):
            moved = self._moved_leases.get((group, token))
            if moved is None:
                return token
            token = moved
        return token

    def witnessed(self, state: GroupState, group: str | None = None) -> GroupState:
        """``state``, remembered for ``group`` unless this process saw it further along."""
        if group is not None:
            self.ran.note(group, state)
            seen = self._witness.get(group)
            if (
                seen is None
                or state.epoch > seen.epoch
                or (state.epoch == seen.epoch and state.last_processed >= seen.last_processed)
            ):
                self._witness.put(group, state)
        return state

    def unpark_unlisted(self, group: str, copies: dict[int, Message]) -> Op[None]:
        """Unpark ``copies`` (what a repair parked again before its save was refused) where
        the record, as it is now, has passed their number and lists nothing there, and the copy
        stored is still this one: no state lists it, so it would be a stray - a later run at its
        number would meet it in place of the listed message.

        A copy ahead of the group stays: any other repair - another thread of this process, or
        another process - may list that very number again at any moment, after parking a copy
        that the store took for this one (it keeps a number's first copy), so an unpark after
        the read would leave the number listed with no copy; its message, acked when parked,
        would be lost (seed 225487). If nothing lists it, ``parked`` tells it from the message
        a later record lists there."""
        state = yield Load(self._consumer, group)
        listed = state.parked
        for seq, copy in copies.items():
            if seq > state.last_processed:
                continue  # ahead of the group: it may be listed again (see above)
            stored = yield ParkedMessage(self._consumer, group, seq)
            if seq not in listed and stored and message_key(stored) == message_key(copy):
                yield Unpark(self._consumer, group, seq)

    def _keep_own_lease(
        self, group: str, seen: GroupState, repaired: GroupState
    ) -> tuple[GroupState, int | None]:
        """``repaired`` still leased (under its new token) to this process's own live run, if
        the lease ``seen`` records is one: (state, the run's token) - else (it, None)."""
        own = self._own_leases.get(group)
        if own is None or own != seen.lease_token or not seen.lease_live(self._clock.now()):
            return repaired, None
        if self._held(group):
            return repaired, None  # held idle, no run under it: fenced like any other
        return replace(repaired, lease_until=seen.lease_until), own

    def _repair(self, group: str, seen: GroupState, state: GroupState) -> Op[bool]:
        """The store handed back an older state than this process wrote: put the group back
        where it was, fence every lease, and say what could not be restored."""
        last = max(seen.last_processed, state.last_processed)
        lost = rules.lost_parked(seen, state)
        # The store's sequence began after this one: copies parked in this one never run.
        ended = rules.other_sequence(seen, state) and state.epoch > seen.epoch
        restored, reissued = dict[int, Message](), list[tuple[int, Message]]()
        past_end = list[tuple[int, Message]]()  # parked past the end of the group seen here
        # Parked in the lost sequence before this process saw it end, if it did: see _keep_ended.
        orphaned = list[tuple[int, Message]]()
        for seq in lost:
            copy = self._parked_copies.get((group, seq))
            if copy is not None and ended and seen.complete and seq > seen.last_processed:
                past_end.append((seq, copy))
            elif copy is not None and ended:
                orphaned.append((seq, copy))
            elif copy is not None:
                yield Park(self._consumer, group, seq, copy)
                restored[seq] = copy
        kept_copies = {*restored, *dict(reissued), *dict(past_end), *dict(orphaned)}
        lost = [s for s in lost if s not in kept_copies]
        repaired = rules.repaired(seen, state, restored=list(restored), now=self._clock.now())
        rewritten = rules.rewritten_number(seen, state)
        # Copies parked at numbers the group had already passed (a reissued number parked
        # after the loss) can never run: they were acked when parked, so each is kept (dead-
        # lettered, once per copy) BEFORE the repaired state stops listing it - a failure or a
        # crash in between leaves the old state, and the next read repairs (and keeps) again.
        # Unless the store's sequence is this one, its copies belong to an older sequence.
        same = not rules.other_sequence(seen, state)
        passed = [s for s in sorted(state.parked) if not same or state.last_processed < s <= last]
        passed = [] if ended else passed
        for seq in passed:
            copy = yield ParkedMessage(self._consumer, group, seq)
            digest = None if copy is None else key_digest(message_key(copy))
            if copy is not None and not (same and seen.records(seq, str(digest))):
                reissued.append((seq, copy))
        repaired, kept = self._keep_own_lease(group, seen, repaired)
        self._decide(
            "store_rollback",
            group,
            state.head,
            rollback_text(
                seen,
                state,
                ended,
                rewritten,
                list(restored),
                kept,
                lost,
                reissued,
                past_end=[seq for seq, _ in past_end],
                orphaned=[seq for seq, _ in orphaned],
            ),
            level=logging.ERROR,
            alert="store_rollback",
        )
        yield from self.keep_reissued(group, reissued, repaired)
        yield from self._keep_lost_sequence(group, seen, state, past_end, orphaned)
        repaired = self._date(repaired)
        if not (yield Save(self._consumer, group, repaired, state)):
            # No state lists them: they would be strays.
            yield from self.unpark_unlisted(group, restored)
            return False  # someone wrote meanwhile: look again
        if kept is not None:
            self._moved_leases.put((group, kept), repaired.lease_token)
            self._own_leases.put(group, repaired.lease_token)
        self._witness.put(group, repaired)
        for seq in passed:
            yield Unpark(self._consumer, group, seq)
        return True

    def keep_reissued(
        self, group: str, reissued: list[tuple[int, Message]], repaired: GroupState
    ) -> Op[None]:
        """Keep each copy of ``reissued`` - parked at a number the group had already passed (a
        reissued number parked after a store loss): it can never run, and it was acked when
        parked, so it is dead-lettered as a reused number (``repaired``: the state the repair
        writes), or handed to the operator whole without a dead-letter topic. Once per copy by
        this process: a refused save brings the repair, and this, again."""
        for seq, copy in reissued:
            once = _copy_of(group, seq, copy)
            if self._kept.get(once):
                continue
            try:
                yield from self._keep_reissued(copy, group, seq, repaired)
            except PermanentError:
                hand_over(self._decide, group, seq, copy)
            self._kept.put(once, True)

    def _keep_lost_sequence(
        self,
        group: str,
        seen: GroupState,
        state: GroupState,
        past_end: list[tuple[int, Message]],
        orphaned: list[tuple[int, Message]],
    ) -> Op[None]:
        """Keep, once each, the copies parked in the sequence ``seen`` that the store lost:
        ``past_end`` (past the end this process saw) as after the end, ``orphaned`` (this
        process saw no end before them) as numbers of a sequence that started again."""
        copies = [(s, c, True) for s, c in past_end] + [(s, c, False) for s, c in orphaned]
        for seq, copy, after_end in copies:
            once = _copy_of(group, seq, copy)
            if self._kept.get(once):
                continue
            if after_end:
                # (It hands the copy over itself, if it must.)
                yield from self._keep_past_end(copy, group, seq, seen)
            else:
                yield from self._keep_ended(copy, group, seq, seen, state)
            self._kept.put(once, True)

    def _keep_ended(
        self, copy: Message, group: str, seq: int, seen: GroupState, state: GroupState
    ) -> Op[None]:
        """``copy``, parked at ``seq`` in the sequence ``seen`` that the store lost (``state``'s
        new one began on the empty record), can never run. This process never saw that sequence
        end before it, and cannot know more: another process may have run it, or ended the group
        before it and dead-lettered it then. So it is kept as what it surely is - a number of a
        sequence that started again (``fifo_sequence_restarted``), never a number given to
        another message - or, with no dead-letter topic, handed to the operator whole."""
        detail = (
            f"{group}#{seq} was parked in the group's sequence of epoch {seen.epoch}, which the "
            f"store lost (at {seen.last_processed} as seen here; a new sequence, epoch "
            f"{state.epoch}, began): this number will never run"
        )
        try:
            yield from self._dead_letter(copy, group, seq, REASON_SEQUENCE_RESTARTED, detail)
        except PermanentError:
            hand_over(
                self._decide,
                group,
                seq,
                copy,
                why=f"was parked in the group's sequence of epoch {seen.epoch}, which the store "
                "lost",
                outcome="restarted_unkept",
                then="publish it again as a new message, or drop it (it may have run, or been "
                "past the group's end: this process cannot tell)",
            )


def _copy_of(group: str, seq: int, copy: Message) -> tuple[str, int, str]:
    """A parked copy's identity: its number, its sequence (epoch) and its message."""
    epoch = copy.attributes.get(FIFO_EPOCH, "")
    return group, seq, f"{epoch}:{key_digest(message_key(copy))}"
