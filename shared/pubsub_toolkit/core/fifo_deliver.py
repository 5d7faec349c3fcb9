"""The FIFO gate's core, part four: a delivery - one, or several of one group - judged against
the group's state: a duplicate, a reused number, a late arrival after a skip, a number past the
group's end or older than a forgotten record, a copy to park (early, blocked, backing off, or
running elsewhere), or the head to run now (under a held lease or a new one).

For a delivery of ``(group, seq)`` against the group's last-processed counter ``last``:
``seq <= last`` is a duplicate (ack); ``seq == last + 1`` takes the lease, runs the handler and
advances; ``seq > last + 1`` is parked and acked (``park=False``: nacked). No I/O: the effects
are yielded (:mod:`.fifo_effects`). (About 310 lines: one delivery and a batch's run share the
rules of a park.)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.core import fifo_rules as rules
from pubsub_toolkit.core import fifo_verdicts as verdicts
from pubsub_toolkit.core.fifo_effects import MAX_CAS_ROUNDS, Op, Park, ParkedMessage, Unpark
from pubsub_toolkit.core.fifo_parts import EarlyArrivalError, ParkedInPlaceError
from pubsub_toolkit.core.fifo_policy import (
    REASON_LATE_AFTER_SKIP,
    REASON_STATE_EXPIRED,
    GateOutcome,
    GateResult,
    message_key,
)
from pubsub_toolkit.core.fifo_rules import EndVerdict
from pubsub_toolkit.core.fifo_run import FifoRun
from pubsub_toolkit.errors import StaleClaimError, TransientError
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.fifo_state.base import GroupState, key_digest


class FifoDeliver(FifoRun):
    """A delivery, or a batch of one group's deliveries."""

    def deliver(self, message: Message, group: str, seq: int) -> Op[GateResult]:
        """Handle one delivery. Returns when it may be acked; raises TransientError to nack."""
        digest = key_digest(message_key(message))
        stored_copy = False
        for _ in range(MAX_CAS_ROUNDS):
            loaded = yield from self._seen.load(group)
            met = yield from self._sequences.meet(group, loaded, message, seq)
            if not isinstance(met, GroupState):
                if met is None:
                    continue  # the record moved: decide again
                return met
            state, now = met, self._clock.now()
            if state.key_of(seq) is not None and not state.records(seq, digest):
                refused = yield from self._refused(message, group, seq, state, loaded)
                if refused is None:
                    continue  # the record moved: decide again
                return refused
            if self._seen.ran.reused(group, state, seq, digest):  # past the state's 64 keys
                refused = yield from self._refused(message, group, seq, state, loaded)
                if refused is None:
                    continue
                return refused
            if seq <= state.last_processed:
                if stored_copy:  # parked by an earlier turn of this loop, then overtaken
                    yield Unpark(self.consumer, group, seq)
                if state.dead_lettered_poison(seq) == digest:
                    # This very message was skipped as poison and dead-lettered then: a copy
                    # redelivered since is no late arrival - say where it is, send nothing again.
                    self._decide("duplicate", group, seq, "already dead-lettered as poison")
                    return GateResult(GateOutcome.DEAD_LETTERED, group, seq)
                if state.is_skipped(seq) and not attr.is_filler(message):
                    # It was given up on (gap or operator skip) and arrived after all: it was
                    # never processed, so it is not a duplicate - keep it, with the reason.
                    (
                        yield from self._dead_letter(
                            message,
                            group,
                            seq,
                            REASON_LATE_AFTER_SKIP,
                            f"{group}#{seq} arrived after the group had skipped it",
                        )
                    )
                    return GateResult(GateOutcome.DEAD_LETTERED, group, seq)
                self._decide("duplicate", group, seq, "already processed")
                return GateResult(GateOutcome.DUPLICATE, group, seq)
            if rules.forgotten_after_expiry(
                state, message, now=now, retention=self.policy.completed_retention
            ):
                return (yield from self._after_expiry(message, group, seq))
            verdict = rules.after_end(state, seq, message)
            if verdict is not EndVerdict.OPEN:
                if stored_copy:  # parked by an earlier turn of this loop, then the group ended
                    yield Unpark(self.consumer, group, seq)
                return (yield from self._end.after_end(message, group, seq, state, verdict))
            at_head = seq == state.head
            if at_head and self._held.holds(group):
                # This process kept the lease since the group's last advance: run under it
                # (no lease write: the advance renews it), or under a new one if it is old.
                leased = yield from self._held_lease(group, state, now, digest)
                if leased is None:
                    continue  # no longer ours, or the state moved: decide again
                return (yield from self._run(group, [(seq, message)], leased, from_park=False))
            waiting = at_head and self._busy(group, state, now)
            if seq > state.head or state.blocked_at is not None or waiting:
                # Early, blocked, backing off, or this very number is being run elsewhere: keep
                # a copy. (Acking a copy of a running head without parking it would lose the
                # message if that worker died: its own copy may come back after our ack.)
                stored_copy = True
                parked = yield from self._park(message, group, seq, digest, state, now)
                if parked is None:
                    continue  # the state moved under us: decide again
                return parked
            leased = yield from self._take_lease(group, state, now, digest)
            if leased is None:
                continue
            return (yield from self._run(group, [(seq, message)], leased, from_park=False))
        raise TransientError(f"{group}#{seq}: the group's state kept changing; try again")

    def deliver_batch(
        self, group: str, deliveries: Sequence[tuple[Message, int]]
    ) -> Op[list[GateResult | Exception]]:
        """Handle several deliveries of ``group`` (``(message, seq)`` each); one result per
        delivery, in order: a GateResult means ack, an exception nack (as :meth:`deliver`).

        In batch mode the consecutive run from the group's head goes to the handler as one
        list and the group advances once past it; every other delivery - early, a duplicate,
        a filler, the run's successors after a failure - gets :meth:`deliver` on its own."""
        pending = sorted(range(len(deliveries)), key=lambda i: deliveries[i][1])
        results: dict[int, GateResult | Exception] = {}
        while pending:  # each turn settles at least one delivery
            if self.batch > 1 and len(pending) > 1:
                try:
                    yield from self._deliver_run(group, deliveries, pending, results)
                except Exception as exc:
                    if not results:
                        raise  # nothing settled yet: the caller nacks the batch whole
                    # Some are settled: never nack them with the rest - each one alone now.
                    number = deliveries[pending[0]][1]
                    self._decide("batch_stopped", group, number, f"{type(exc).__name__}: {exc}")
                if pending[0] in results:
                    pending = [i for i in pending if i not in results]
                    continue
            i = pending.pop(0)
            if i in results:  # settled by a batch's run (a head it nacked)
                continue
            message, seq = deliveries[i]
            try:
                results[i] = yield from self.deliver(message, group, seq)
            except Exception as exc:  # the caller nacks it, and logs why
                results[i] = exc
        return [results[i] for i in range(len(deliveries))]

    def _deliver_run(
        self,
        group: str,
        deliveries: Sequence[tuple[Message, int]],
        order: list[int],
        results: dict[int, GateResult | Exception],
    ) -> Op[None]:
        """Run the consecutive deliveries from the group's head as one batch, if there are at
        least two and the group's lease can be had; their results go into ``results``. Raises
        what the store raised before the run."""
        state = yield from self._seen.load(group)
        now = self._clock.now()
        run: list[int] = []
        digests: set[str] = set()
        for i in order:
            message, seq = deliveries[i]
            if seq != state.head + len(run) or len(run) == self.batch:
                break
            if not self._batchable(
                group, state, seq, message, digests
            ) or rules.forgotten_after_expiry(
                state, message, now=now, retention=self.policy.completed_retention
            ):
                break
            digests.add(key_digest(message_key(message)))
            run.append(i)
        if len(run) < 2 or state.blocked_at is not None or state.backing_off(now):
            return  # one by one: the usual rules decide each
        first_digest = key_digest(message_key(deliveries[run[0]][0]))
        leased = None
        if self._held.holds(group):
            leased = yield from self._held_lease(group, state, now, first_digest)
        if leased is None:
            leased = yield from self._take_lease(group, state, now, first_digest)
        if leased is None:
            return  # someone else runs the group: one by one, they park
        steps = [(deliveries[i][1], deliveries[i][0]) for i in run]
        try:
            result = yield from self._run(group, steps, leased, from_park=False)
        except StaleClaimError as exc:
            # Fenced after the handler ran (``_outlived`` named each number): the run's
            # deliveries get the failure, as ``deliver`` gives it for one number. Judged alone
            # now, its numbers - not recorded - would run again at once in this very process,
            # which has just run them (simulation seed 12956).
            self._decide("batch_stopped", group, steps[0][0], f"{type(exc).__name__}: {exc}")
            for i in run:
                results[i] = exc
            return
        except ParkedInPlaceError as exc:
            # Its copy took an earlier sequence's place (FifoRun._deliver_again): nacked, not
            # judged alone - that would ack it as parked, and the late unpark may take the copy.
            self._decide("batch_stopped", group, steps[0][0], f"{type(exc).__name__}: {exc}")
            for i in run:
                if deliveries[i][1] == exc.seq:
                    results[i] = exc
            return
        except Exception as exc:
            # One number of the batch failed on its own (its copy is parked for the retry) or
            # the store failed: each delivery is then judged alone - processed ones are
            # duplicates now, the failed one is retrying, the rest wait parked behind it.
            self._decide("batch_stopped", group, steps[0][0], f"{type(exc).__name__}: {exc}")
            return
        if result.outcome is GateOutcome.PROCESSED:
            for i in run:
                results[i] = GateResult(GateOutcome.PROCESSED, group, deliveries[i][1])

    def _refused(
        self, message: Message, group: str, seq: int, state: GroupState, loaded: GroupState
    ) -> Op[GateResult | None]:
        """Dead-letter ``message`` as a reused number of ``state``; None when ``state`` adopts
        an epoch the record (``loaded``) has not written yet and the record moved meanwhile.

        The adoption is written first: the refusal rests on the number being taken in that
        epoch, so the store must say so. Unwritten, a process that saw the group before a
        store loss takes the record without an epoch (begun after the loss by a message
        without one) for the loss itself and writes its old record back: the run that took the
        number is gone, that epoch's sequence then starts again from 0 on the old record, and
        the number refused here runs with yet another message (simulation seed 230393)."""
        if loaded.epoch == 0 and state.epoch != 0:
            adopted = yield from self._seen.save(group, state, loaded)
            if adopted is None:
                return None
            state = adopted
        return (yield from self._reused(message, group, seq, state))

    def _after_expiry(self, message: Message, group: str, seq: int) -> Op[GateResult]:
        """A delivery older than the retention for a group without a record: its record may
        have expired after this very message ran, so it is kept, never run again."""
        if attr.is_filler(message):
            self._decide("filled", group, seq, "a filler for a group whose record expired")
            return GateResult(GateOutcome.FILLED, group, seq)
        detail = (
            f"{group}#{seq} was published over {self.policy.completed_retention} ago and the "
            "group has no record: it may have run before the record expired"
        )
        self._decide("state_expired", group, seq, detail, level=logging.WARNING)
        yield from self._dead_letter(message, group, seq, REASON_STATE_EXPIRED, detail)
        return GateResult(GateOutcome.DEAD_LETTERED, group, seq)

    def _park(  # noqa: PLR0917 - one private call site, every argument is needed
        self,
        message: Message,
        group: str,
        seq: int,
        digest: str,
        state: GroupState,
        now: datetime,
    ) -> Op[GateResult | None]:
        if not self.policy.park and state.blocked_at is None and seq > state.head:
            self._decide("early_nacked", group, seq, f"early (waiting for {state.head}); nack")
            raise EarlyArrivalError(f"{group}#{seq} is early; waiting for {state.head}")
        ours, displaced = yield from self._park_copy(group, seq, message, digest, state)
        if not ours:
            # Another message got its copy stored at this number first: that one holds it.
            return (yield from self._reused(message, group, seq, state))
        new = rules.with_arrival_parked(state, seq, digest, now=now)
        if seq not in state.parked and not (yield from self._seen.save(group, new, state)):
            return None
        if displaced:
            self._deliver_again(group, seq)  # the old sequence's run may still unpark it
        if seq in state.parked:  # a redelivered copy: the parked one stands for it
            retrying = seq == state.head and state.backing_off(now)
            return GateResult(GateOutcome.RETRYING if retrying else GateOutcome.PARKED, group, seq)
        if seq == state.head and state.blocked_at is None:
            if state.backing_off(now):
                self._decide("retry_scheduled", group, seq, "backing off; copy parked")
                return GateResult(GateOutcome.RETRYING, group, seq)
            self._decide("in_progress", group, seq, "being processed elsewhere; copy parked")
            return GateResult(GateOutcome.IN_PROGRESS, group, seq)
        self._decide("parked", group, seq, f"early; waiting for {state.head}")
        outcome = GateOutcome.BLOCKED if state.blocked_at is not None else GateOutcome.PARKED
        return GateResult(outcome, group, seq)

    def _park_copy(
        self, group: str, seq: int, message: Message, digest: str, state: GroupState
    ) -> Op[tuple[bool, bool]]:
        """Park an arrival (``digest`` its key's); first True only if the stored copy is this
        message (a store keeps the first copy of a number, and the state must name the same
        one); second True when it replaced a copy of an earlier sequence (see below).

        A copy of an earlier sequence the record saw end holds nothing: the restart settled
        every copy it listed, so this is a stray its process left unlisted (parked, then crashed
        before the state's write; the message then ran from its own delivery, which unparks
        nothing unlisted). It makes way, or the new message given its number would be
        dead-lettered as a reuse and the group stop there (seed 223215). Unless the run that
        passed its number has yet to unpark it (it unparks after its advance): then it takes
        the new copy with it, so the arrival is delivered again, not acked (seed 160824)."""
        yield Park(self.consumer, group, seq, message)
        stored = yield ParkedMessage(self.consumer, group, seq)
        displaced = stored is not None and verdicts.stray_of_earlier_sequence(state, stored)
        if displaced:
            yield Unpark(self.consumer, group, seq)
            yield Park(self.consumer, group, seq, message)
            stored = yield ParkedMessage(self.consumer, group, seq)
        if stored is not None and key_digest(message_key(stored)) != digest:
            return False, False
        self._seen.remember_parked(group, seq, message)
        return True, displaced
