"""The FIFO gate meets a counter's epochs: a group whose counter started again is a new sequence.

A sequence counter records an epoch when it is created (:mod:`pubsub_toolkit.stores.counters.
base`) and the Publisher stamps it on each message (``fifo_epoch``). A counter that starts
again at 1 - Redis restarted without persistence, or the counter expired with its idle group -
has a newer epoch, and its numbers are new messages, not copies of the old ones. Before the gate
judges a delivery by its number, :meth:`Sequences.meet` judges it by its epoch:

* none, or the group's own: the usual rules decide (a record without an epoch - new, or from
  before epochs - adopts the message's and keeps its position);
* newer: the group's sequence starts again (:func:`~.fifo_rules.restarted`) - once no number of
  the old one is running, nor waits parked at its head (that run goes first: it was published
  before the new counter began); copies parked behind a gap in the old one can never run now,
  so each is dead-lettered ``fifo_sequence_restarted`` first, under a lease this worker takes
  for the purpose - and with no dead-letter topic to keep them, the new sequence waits for
  the old one (they were acked when parked: none is dropped);
* older: a late copy of an earlier sequence - a duplicate if that sequence had passed its
  number (but dead-lettered ``fifo_sequence_reused``, with an ALERT, when the record holds
  another message's key there: a producer reused the number), else dead-lettered
  ``fifo_sequence_restarted`` (it never ran, and never will).

A copy whose dedup key already had its turn in the group (a producer's retry renumbered after
its first copy ran, or was dead-lettered as poison) is no message the old sequence failed to
reach: parked when the sequence restarts, or arriving late after that, it is dropped as a
duplicate - never dead-lettered ``fifo_sequence_restarted`` beside its effect (seed 132612).

(About 310 lines: the three ways a delivery meets an epoch, and the settling of the old
sequence's copies, share the restart's lease and ALERT.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import NoReturn

from pubsub_toolkit.attributes import FIFO_EPOCH
from pubsub_toolkit.clock import Clock
from pubsub_toolkit.core import fifo_rules as rules
from pubsub_toolkit.core import fifo_verdicts as verdicts
from pubsub_toolkit.core.fifo_effects import MAX_CAS_ROUNDS, Decide, Op, ParkedMessage, Unpark
from pubsub_toolkit.core.fifo_policy import (
    REASON_SEQUENCE_RESTARTED,
    REASON_SEQUENCE_REUSED,
    GateOutcome,
    GateResult,
)
from pubsub_toolkit.core.fifo_seen import DeadLetter, SeenStore
from pubsub_toolkit.errors import PermanentError, TransientError
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.fifo_state.base import GroupState


class Sequences:
    """The epoch rules of one gate (its store, its witness, its decision log)."""

    def __init__(  # noqa: PLR0917 - the gate's own parts, one call site
        self,
        seen: SeenStore,
        consumer: str,
        clock: Clock,
        decide: Decide,
        dead_letter: DeadLetter,
        lease: timedelta,
        held: Callable[[str], bool],
        busy: Callable[[str], bool],
    ) -> None:
        """``held(group)``: whether this process holds the group's lease idle between
        deliveries (no run of the old sequence is under way then); ``busy(group)``: whether
        this process is running one of the group's numbers now (past its lease, too)."""
        self._seen = seen
        self._consumer = consumer
        self._clock = clock
        self._decide = decide
        self._dead_letter = dead_letter
        self._lease = lease
        self._held = held
        self._busy = busy

    def meet(
        self, group: str, state: GroupState, message: Message, seq: int
    ) -> Op[GroupState | GateResult | None]:
        """The state to judge ``message`` against, a GateResult if it is settled here, or None
        when the group's record moved meanwhile (read it again). Raises TransientError while a
        number of the old sequence is running (the new one waits for it)."""
        epoch = rules.message_epoch(message)
        if epoch is None:
            if message.attributes.get(FIFO_EPOCH) is not None:
                self._decide(
                    "epoch_ignored",
                    group,
                    seq,
                    f"{FIFO_EPOCH}={message.attributes[FIFO_EPOCH]!r} is not an epoch "
                    "(decimal digits): judged by its number alone",
                    level=logging.WARNING,
                )
            return state
        if epoch == state.epoch:
            return state
        if state.epoch == 0:
            # A record from before epochs, or new, or started by a message without one (not
            # the Publisher's): it follows this counter from here on, position unchanged.
            # (Written with the record's next change - or before a refusal of this message
            # as a reused number: FifoDeliver._refused.)
            return replace(state, epoch=epoch)
        if epoch > state.epoch:
            return (yield from self._restart(group, state, epoch))
        return (yield from self._older(group, state, message, seq, epoch))

    def _older(
        self, group: str, state: GroupState, message: Message, seq: int, epoch: int
    ) -> Op[GateResult]:
        verdict = verdicts.older_verdict(state, epoch, seq, message)
        if verdict is verdicts.OlderVerdict.DUPLICATE:
            return self._duplicate(group, seq, epoch)
        if verdict is verdicts.OlderVerdict.REUSED:
            # Kept with the reason, as in the group's current sequence (seed 10205).
            return (yield from self._taken(group, state, message, seq, epoch))
        if self._ran_before(group, state, seq, message):
            return GateResult(GateOutcome.DUPLICATE, group, seq)
        detail = (
            f"{group}#{seq} belongs to an earlier sequence of the group (epoch {epoch}); its "
            f"counter started again (epoch {state.epoch}) before this number ran"
        )
        self._decide("sequence_ended", group, seq, f"ALERT: {detail}", level=logging.ERROR)
        yield from self._dead_letter(message, group, seq, REASON_SEQUENCE_RESTARTED, detail)
        return GateResult(GateOutcome.DEAD_LETTERED, group, seq)

    def _duplicate(self, group: str, seq: int, epoch: int) -> GateResult:
        self._decide(
            "duplicate",
            group,
            seq,
            f"of an earlier sequence of the group (epoch {epoch}) that was past it",
        )
        return GateResult(GateOutcome.DUPLICATE, group, seq)

    def _taken(
        self, group: str, state: GroupState, message: Message, seq: int, epoch: int
    ) -> Op[GateResult]:
        detail = (
            f"{group}#{seq} of an earlier sequence of the group (epoch {epoch}) already belongs "
            f"to another dedup key (that sequence ended at {state.prior[0][1]}): a producer "
            "reused the number, or the counter's store lost writes"
        )
        self._decide("sequence_reused", group, seq, f"ALERT: {detail}", level=logging.ERROR)
        yield from self._dead_letter(message, group, seq, REASON_SEQUENCE_REUSED, detail)
        return GateResult(GateOutcome.DEAD_LETTERED, group, seq)

    def _restart(self, group: str, state: GroupState, epoch: int) -> Op[GroupState | None]:
        now = self._clock.now()
        verdict = verdicts.restart_verdict(
            state, now=now, held_idle=self._held(group), running_here=self._busy(group)
        )
        # A run under way here - even one that outlived its lease - finishes first: a restart
        # now would refuse its advance and dead-letter its redelivery although it ran.
        if verdict is verdicts.RestartVerdict.RUNNING:
            self._decide(
                "sequence_waits",
                group,
                state.head,
                f"the group's counter started again (epoch {epoch}) while #{state.head} of "
                "the old sequence runs: deliver again later",
            )
            raise TransientError(f"{group}: the old sequence's #{state.head} is running")
        if verdict is verdicts.RestartVerdict.HEAD_PARKED:
            # The old head and the parked run after it go first, in order: the sweep runs them.
            self._decide(
                "sequence_waits",
                group,
                state.head,
                f"the group's counter started again (epoch {epoch}) while #{state.head} of "
                "the old sequence waits parked: it runs first; deliver again later",
            )
            raise TransientError(f"{group}: the old sequence's #{state.head} waits parked")
        if verdict is verdicts.RestartVerdict.SETTLE:
            # Fenced first, so nobody runs a copy this worker is about to dead-letter.
            fenced = replace(
                state, lease_token=state.lease_token + 1, lease_until=now + self._lease
            )
            state_or_none = yield from self._seen.save(group, fenced, state)
            if state_or_none is None:
                return None
            return (yield from self.settle_and_restart(group, state_or_none, epoch))
        new = yield from self._seen.save(group, rules.restarted(state, epoch), state)
        if new is not None:
            self._said(group, state, epoch, [])
        return new

    def settle_and_restart(
        self, group: str, fenced: GroupState, epoch: int
    ) -> Op[GroupState | None]:
        """Under this worker's lease (``fenced``, the state it wrote to take it): every copy
        parked in the old sequence dead-lettered (but a copy of a key that had its turn, or of
        one parked at a lower number: once) and unparked, then the new sequence (``epoch``)
        written; the new state, or None when the record was fenced in turn (decide again). A
        copy with no dead-letter topic to keep it is never dropped: the lease is given back
        and the new sequence waits for the old one (see :meth:`_wait`; TransientError)."""
        state, settled, kept = fenced, list[int](), list[int]()
        for _ in range(MAX_CAS_ROUNDS):
            if state.lease_token != fenced.lease_token:
                return None  # fenced in turn (a store-loss repair): decide again
            for seq in sorted(set(state.parked) - set(settled)):
                copy = yield ParkedMessage(self._consumer, group, seq)
                if copy is None or self._ran_before(group, state, seq, copy):
                    pass  # a renumbered copy of a key that had its turn: nothing to keep
                elif (first := _first_parked(state, seq)) != seq:
                    # A producer's retry renumbered while its first copy waited parked too:
                    # that one's letter keeps the message (once, not once per copy).
                    self._decide(
                        "duplicate",
                        group,
                        seq,
                        f"a copy of #{first} of the old sequence (the same dedup key, parked "
                        "too): dead-lettered once, at its first number",
                    )
                elif (yield from self._keep(copy, group, seq, state)):
                    kept.append(seq)
                else:
                    yield from self._wait(group, seq, state)
                yield Unpark(self._consumer, group, seq)
                settled.append(seq)
            new = yield from self._seen.save(group, rules.restarted(state, epoch), state)
            if new is not None:
                self._said(group, state, epoch, kept)  # the ALERT names only real letters
                return new
            state = yield from self._seen.load(group)  # a copy parked meanwhile: settle it too
        raise TransientError(f"{group}: the state kept changing while its sequence restarted")

    def _ran_before(self, group: str, state: GroupState, seq: int, message: Message) -> bool:
        """True when ``message``'s dedup key already had its turn in ``group`` at another
        number (ran, or was dead-lettered as poison there): a producer's retry renumbered
        after its first copy ran - a duplicate, which the old sequence's end loses nothing of.
        Dead-lettering it ``fifo_sequence_restarted`` would report a message that ran as one
        that never will (seed 132612: both an effect and a dead letter)."""
        found = verdicts.ran_before(group, state, seq, message, self._seen.ran.earlier)
        if found is None:
            return False
        self._decide(
            "duplicate",
            group,
            seq,
            f"a copy of the old sequence's #{seq} whose dedup key already had its turn in the "
            "group: not dead-lettered as restarted",
        )
        return True

    def _keep(self, copy: Message, group: str, seq: int, state: GroupState) -> Op[bool]:
        """Dead-letter ``copy``; False when there is no dead-letter topic to keep it."""
        detail = (
            f"{group}#{seq} was parked in the group's sequence of epoch {state.epoch}, which "
            f"ended at {state.last_processed}: its counter started again, so this number will "
            "never come"
        )
        try:
            yield from self._dead_letter(copy, group, seq, REASON_SEQUENCE_RESTARTED, detail)
        except PermanentError:
            return False
        return True

    def _wait(self, group: str, seq: int, fenced: GroupState) -> Op[NoReturn]:
        """No dead-letter topic: a copy parked in the old sequence (acked when parked) cannot
        be kept, so it is not dropped - the old sequence goes on as it would have (poison
        blocks until an operator skips or replays it; a gap waits for its number, or for
        its policy or an operator to skip it) and the new sequence waits for it: the lease
        taken to settle it is given back, and this delivery is nacked."""
        yield from self._seen.save(group, replace(fenced, lease_until=None), fenced)
        why = "blocked as poison" if seq == fenced.blocked_at else "parked"
        self._decide(
            "sequence_waits",
            group,
            seq,
            f"the group's counter started again while #{seq} of the old sequence is {why} and "
            "there is no dead-letter topic to keep it: the new sequence waits for the old one "
            "(skip or replay what holds it)",
            level=logging.WARNING,
        )
        raise TransientError(f"{group}: the old sequence's #{seq} cannot be kept; it goes first")

    def _said(self, group: str, old: GroupState, epoch: int, settled: list[int]) -> None:
        text = (
            f"the group's counter started again (epoch {old.epoch} -> {epoch}; expired with "
            f"the idle group, or lost by its store): the old sequence ended at "
            f"{old.last_processed}, the new one runs from 1"
        )
        if settled:
            text = f"ALERT: {text}; copies parked in the old one dead-lettered: {settled}"
        self._decide(
            "sequence_restarted",
            group,
            1,
            text,
            level=logging.ERROR if settled else logging.WARNING,
            **({"alert": "sequence_restarted"} if settled else {}),
        )


def _first_parked(state: GroupState, seq: int) -> int:
    """The lowest parked number of ``state`` whose copy has the same dedup key as ``seq``'s
    (``seq`` itself when none below it has): a producer's retry renumbered while its first copy
    waited parked is the same message at two numbers (seed 132734). Read from the record's
    listing, not from the copies, so a settle that is retried after it had unparked the first
    one still takes the later one for a copy."""
    digest = state.key_of(seq)
    if digest is None:
        return seq
    return next((s for s in state.parked if s < seq and state.key_of(s) == digest), seq)
