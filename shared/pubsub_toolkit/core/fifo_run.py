"""The FIFO gate's core, part three: the run loop - a number (or a batch of consecutive ones)
run under the group's lease, then every parked successor - and what a failure of the handler
means (a counted attempt and a backoff, or poison: dead-lettered and skipped, or blocked), and
the gap policy.

Every decision is taken from the state *this worker wrote*, never from a re-read; no I/O: the
effects are yielded (:mod:`.fifo_effects`). (About 340 lines: the run loop and its failure
handling share the lease token and the state each step wrote.)
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import NoReturn

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.core import fifo_rules as rules
from pubsub_toolkit.core import fifo_verdicts as verdicts
from pubsub_toolkit.core.fifo_advance import FifoAdvance
from pubsub_toolkit.core.fifo_effects import DeadLetter, Op, SpanEnd, SpanStart, Unpark
from pubsub_toolkit.core.fifo_parts import Found, HandlerFailedError, ParkedInPlaceError, Step
from pubsub_toolkit.core.fifo_policy import (
    REASON_POISON,
    GapPolicy,
    GateOutcome,
    GateResult,
    message_key,
)
from pubsub_toolkit.core.fifo_rules import ran_earlier
from pubsub_toolkit.errors import RetryLater, StaleClaimError, StoreUnavailableError
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.fifo_state.base import POISON_MARK, GroupState, key_digest

_MAX_GAP_REPORTS = 10_000  # groups whose gap this process reported and still remembers


class FifoRun(FifoAdvance):
    """The run loop under a group's lease, and the handler's failures."""

    def _run(
        self, group: str, steps: list[Step], state: GroupState, *, from_park: bool
    ) -> Op[GateResult]:
        """Run ``steps`` (the head, or a batch of consecutive numbers from it) and then every
        parked successor, holding the lease throughout.

        Every decision here is taken from the state *this worker wrote*, never from a re-read:
        a re-read may already show the next worker's lease and parked messages.
        """
        first, released = steps[0][0], 0
        first_outcome: GateOutcome | None = None
        token = state.lease_token
        with self._held.running(group):  # this process does not take it over
            while True:
                if len(steps) == 1:
                    state, outcome, stop = yield from self._run_one(
                        group, token, steps[0], state, from_park
                    )
                else:
                    state, outcome, stop = yield from self._run_batch(
                        group, token, steps, state, from_park
                    )
                first_outcome = first_outcome or outcome
                if stop:
                    return GateResult(first_outcome, group, first, released)
                if state.complete:
                    # The marked end is behind the group: nothing after it runs (its lease is free).
                    last = state.last_processed
                    self._decide("completed", group, last, "the group's last number (fifo_end)")
                    yield from self._end.settle(group, state)
                    return GateResult(first_outcome, group, first, released)
                if state.lease_until is None:
                    return GateResult(first_outcome, group, first, released)  # lease freed
                steps = yield from self._parked_steps(group, state)
                if not steps:
                    if self._held.enabled:
                        self._held.hold(group, token)  # for the group's next delivery
                    else:
                        yield from self._release_lease(group, token, known=state)
                    return GateResult(first_outcome, group, first, released)
                from_park = True
                released += len(steps)

    def _run_one(
        self, group: str, token: int, step: Step, state: GroupState, from_park: bool
    ) -> Op[tuple[GroupState, GateOutcome, bool]]:
        """Run one number; (state, outcome, whether the run stops here). A message run from
        another's delivery (released from the park) or a sweep gets a span in its own trace."""
        yield SpanStart(step[1])
        try:
            ran = yield from self._run_number(group, token, step, state, from_park)
        except GeneratorExit:
            raise  # closed unfinished: nothing more may be yielded
        except BaseException as exc:
            yield SpanEnd(exc)
            raise
        yield SpanEnd()
        return ran

    def _run_number(
        self, group: str, token: int, step: Step, state: GroupState, from_park: bool
    ) -> Op[tuple[GroupState, GateOutcome, bool]]:
        seq, message = step
        ran_before = verdicts.ran_before(group, state, seq, message, self._seen.ran.earlier)
        filled = attr.is_filler(message) or ran_before is not None
        if not filled and verdicts.poison_pending(state, self.policy.max_attempts):
            # An earlier run found it poison and then failed before the verdict was recorded
            # (its dead letter's publish timed out - maybe after the topic took it - or the
            # write after it failed): the verdict stands. The letter goes again (an unconfirmed
            # output may repeat), the handler never runs again (seed 232256: an effect next to
            # the letter).
            detail = (
                f"handler failed {state.attempts} times (an earlier run's verdict, "
                "whose dead letter was not confirmed)"
            )
            state, stop = yield from self._poisoned(
                group, seq, message, token=token, detail=detail, state=state
            )
            return state, stop or GateOutcome.DEAD_LETTERED, stop is not None
        found = Found()
        try:
            state = yield from self._handle_and_advance(
                group,
                token,
                seq,
                message,
                run_handler=ran_before is None,
                known=state,
                found=found,
            )
        except (StaleClaimError, StoreUnavailableError) as exc:
            # Not the handler's failure: we lost the group, or the store hiccuped after the
            # handler ran. Counting it as an attempt could dead-letter a processed message.
            self._outlived(group, [] if filled else [step], exc)
            raise
        except Exception as exc:
            state, stop = yield from self._on_failure(
                group, seq, message, token=token, exc=exc, from_park=from_park
            )
            return state, stop or GateOutcome.DEAD_LETTERED, stop is not None
        if from_park or found.parked:  # a copy is stored (the common case has none)
            yield Unpark(self.consumer, group, seq)
        if filled:
            why = message.attributes.get(attr.FIFO_FILLER) or (
                f"the same dedup key had its turn at #{ran_before}"
            )
            self._decide("filled", group, seq, f"no new message at this number ({why})")
            return state, GateOutcome.FILLED, False
        self._decide("processed", group, seq, "processed in order")
        return state, GateOutcome.PROCESSED, False

    def _run_batch(
        self, group: str, token: int, steps: list[Step], state: GroupState, from_park: bool
    ) -> Op[tuple[GroupState, GateOutcome, bool]]:
        """Run consecutive numbers as one handler call and one advance past them all.

        If the handler fails, nothing is counted against anyone yet: the batch's numbers run
        again one at a time (each a list of one), so a poison message is found and handled
        alone and its neighbours are not blamed. (A batch handler must therefore be all or
        nothing - one transaction - or its effects for the numbers before the failing one
        happen twice.)"""
        if verdicts.poison_pending(state, self.policy.max_attempts):
            # The head's poison verdict stands (see _run_number): it is settled alone.
            return (yield from self._one_at_a_time(group, token, steps, state, from_park))
        found = Found()
        numbers = f"#{steps[0][0]}-#{steps[-1][0]}"
        try:
            state = yield from self._handle_and_advance_batch(
                group, token, steps, known=state, found=found
            )
        except (StaleClaimError, StoreUnavailableError) as exc:
            self._outlived(group, steps, exc)
            raise  # as for one number: not the handler's failure
        except Exception as exc:
            if verdicts.batch_failure(exc) is verdicts.BatchFailure.WAIT:
                # The handler's own decision for the whole batch (RetryLater), not a failure to
                # narrow down: the head waits the delay (a counted attempt, as one by one) and
                # the rest wait parked behind it.
                head, message = steps[0]
                state, waits = yield from self._on_failure(
                    group, head, message, token=token, exc=exc, from_park=from_park
                )
                return state, waits or GateOutcome.DEAD_LETTERED, waits is not None
            self._decide(
                "batch_failed",
                group,
                steps[0][0],
                f"batch {numbers} failed ({type(exc).__name__}: {exc}); one at a time",
                level=logging.WARNING,
            )
            return (yield from self._one_at_a_time(group, token, steps, state, from_park))
        for seq, _message in steps:
            if from_park or seq in found.parked:
                yield Unpark(self.consumer, group, seq)
            self._decide("processed", group, seq, f"processed in order (batch {numbers})")
        return state, GateOutcome.PROCESSED, False

    def _one_at_a_time(
        self, group: str, token: int, steps: list[Step], state: GroupState, from_park: bool
    ) -> Op[tuple[GroupState, GateOutcome, bool]]:
        """A batch's numbers run one by one, in order, until one stops the run."""
        outcome: GateOutcome | None = None
        for step in steps:
            state, one, stop = yield from self._run_one(group, token, step, state, from_park)
            outcome = outcome or one
            if stop:
                return state, outcome, True
        return state, outcome or GateOutcome.PROCESSED, False

    def _outlived(self, group: str, steps: list[Step], exc: Exception) -> None:
        """Said for each of ``steps`` whose run ended fenced (``exc``: the handler outlived the
        lease and another worker took the group over, or an operator skipped it): it ran here,
        and the worker that holds the group now may run it again."""
        for seq, message in verdicts.outlived(steps, exc):
            self._decide(
                "lease_outlived",
                group,
                seq,
                f"ALERT: ran here, then fenced ({exc}): it may run again elsewhere",
                level=logging.ERROR,
                dedup_key=message_key(message),
                alert="lease_outlived",
            )

    def _parked_steps(self, group: str, state: GroupState) -> Op[list[Step]]:
        """The parked head to run next - with, in batch mode, the consecutive parked numbers
        after it that can join its batch; [] if the head is not parked (or not stored)."""
        head = state.head
        message = (
            (yield from self._seen.parked(group, state, head)) if head in state.parked else None
        )
        if message is None:
            return []
        steps: list[Step] = [(head, message)]
        if self.batch == 1 or not self._batchable(group, state, head, message, set()):
            return steps
        digests = {key_digest(message_key(message))}
        while len(steps) < self.batch and steps[-1][0] + 1 in state.parked:
            seq = steps[-1][0] + 1
            following = yield from self._seen.parked(group, state, seq)
            if following is None or not self._batchable(group, state, seq, following, digests):
                break
            digests.add(key_digest(message_key(following)))
            steps.append((seq, following))
        return steps

    def _batchable(
        self, group: str, state: GroupState, seq: int, message: Message, digests: set[str]
    ) -> bool:
        """True if ``message`` at ``seq`` can join a batch: a plain message whose number is its
        own - no filler, no end of group, no copy of a key that ran (or is in the batch) -
        so it needs none of the one-number rules; anything else runs on its own."""
        key = message_key(message)
        digest = key_digest(key)
        return (
            not attr.is_filler(message)
            and not attr.is_end_of_group(message)
            and not state.complete
            and rules.same_sequence(state, message)
            and ran_earlier(state, seq, message) is None
            and self._seen.ran.earlier(group, state, seq, message) is None
            and state.key_of(seq) in (None, digest)
            # (A message without any identity - a hand-made one - has no duplicate to miss.)
            and not (key and digest in digests)
        )

    def _on_failure(
        self,
        group: str,
        seq: int,
        message: Message,
        *,
        token: int,
        exc: Exception,
        from_park: bool,
    ) -> Op[tuple[GroupState, GateOutcome | None]]:
        """Count the failure; poison past the limit. Returns (state, outcome if we stop).

        A handler's ``RetryLater`` is a counted attempt whose next one is exactly its delay
        away; its delivery is acked (the parked copy is the retry, the group holds its place).
        """
        counts = rules.counts_as_attempt(exc)
        state = yield from self._update(
            group, token, lambda s: rules.failure_counted(s, counts=counts)
        )
        refused = rules.poison_at_once(exc)
        if state.attempts < self.policy.max_attempts and not refused:
            now = self._clock.now()
            retry_at = rules.next_attempt_at(self.policy, state.attempts, now=now, exc=exc)
            asked = isinstance(exc, RetryLater)
            self._decide(
                "retry_later" if asked else "handler_failed",
                group,
                seq,
                f"attempt {state.attempts} of {self.policy.max_attempts} "
                f"{'asked to retry later' if asked else 'failed'} "
                f"({'counted' if counts else 'transient, not counted'}); next in "
                f"{(retry_at - now).total_seconds():.0f}s: {exc}",
                level=logging.INFO if asked else logging.WARNING,
            )
            displaced = False
            if not from_park:  # kept for the sweeper
                displaced = yield from self._seen.park_run(group, seq, message)
            digest = key_digest(message_key(message))
            yield from self._update(
                group, token, lambda s: rules.retry_later(s, seq, digest, at=retry_at)
            )
            if not from_park and not asked:
                raise HandlerFailedError(f"{group}#{seq} failed: {exc}") from exc
            if displaced:
                self._deliver_again(group, seq)  # (the handler waits its delay all the same)
            return state, GateOutcome.RETRYING  # the sweeper retries when it is due
        detail = (
            f"handler raised {type(exc).__name__}: {exc}"
            if refused
            else f"handler failed {state.attempts} times: {type(exc).__name__}: {exc}"
        )
        return (
            yield from self._poisoned(group, seq, message, token=token, detail=detail, state=state)
        )

    def _deliver_again(self, group: str, seq: int) -> NoReturn:
        """Nack a delivery whose copy was just parked in place of an earlier sequence's copy
        at ``seq``: the run that passed that number unparks it after its advance - maybe still
        to come, and taking this copy with it. Acked, the message would be gone with this
        process (simulation seed 160824); delivered again, its copy is parked again."""
        self._decide(
            "park_confirming",
            group,
            seq,
            "parked where the old sequence's copy was (its run may still unpark the number): "
            "deliver again to keep the copy",
        )
        raise ParkedInPlaceError(group, seq)

    def _poisoned(
        self,
        group: str,
        seq: int,
        message: Message,
        *,
        token: int,
        detail: str,
        state: GroupState,
    ) -> Op[tuple[GroupState, GateOutcome | None]]:
        """The poison verdict applied: dead-lettered, then skipped or the group blocked.
        Returns (state, outcome if we stop)."""
        verdict = verdicts.poison_verdict(self.policy.poison, dead_letters=self.dead_letters)
        if verdict is verdicts.PoisonVerdict.SKIP:
            if self.dead_letters:  # always, when skipped: the verdict holds that rule
                yield DeadLetter(message, REASON_POISON, detail, f"{group}#{seq}")
            poisoned = POISON_MARK + key_digest(message_key(message))
            state = yield from self._advance(
                group,
                token,
                seq,
                skipped=(seq,),
                digest=poisoned,
                end=attr.is_end_of_group(message),  # a poison end still ends the group
            )
            yield Unpark(self.consumer, group, seq)
            self._decide("poison_skipped", group, seq, detail, level=logging.ERROR)
            return state, None  # go on with the parked successors
        if self.dead_letters:
            yield DeadLetter(message, REASON_POISON, detail, f"{group}#{seq}")
        else:
            # Skipping without a dead-letter copy would lose the message silently: block.
            detail += " (no dead-letter topic: blocked instead of skipped)"
        # The ALERT first: should the write below time out after applying, the group is
        # blocked all the same, and the operator must have been told.
        self._decide(
            "poison_blocked", group, seq, f"ALERT: group blocked; {detail}", level=logging.ERROR
        )
        (yield from self._seen.park_run(group, seq, message))  # kept for an operator's replay
        digest = key_digest(message_key(message))
        yield from self._update(group, token, lambda s: rules.blocked(s, seq, digest))
        return state, GateOutcome.DEAD_LETTERED if self.dead_letters else GateOutcome.BLOCKED

    def _on_gap(self, group: str, state: GroupState, now: datetime) -> Op[GroupState]:
        reports = self._gap_reports
        if not verdicts.gap_expired(state, now=now, timeout=self.policy.gap_timeout):
            reports.pop(group, None)
            return state
        since = verdicts.gap_started(state)
        assert since is not None  # gap_expired says so
        age = (now - since).total_seconds()
        reported, due = reports.get(group, (None, 0.0))
        if reported != since or age >= due:
            # The first report when the gap times out, the next when its age has doubled: a
            # consumer sweeps every second, and an ALERT per sweep buried every other line.
            if len(reports) > _MAX_GAP_REPORTS:
                reports.clear()  # bounded: at worst a gap is reported again early
            reports[group] = (since, 2 * age)
            self._decide(
                "gap_timeout",
                group,
                state.head,
                f"ALERT: {state.head} missing for {age:.0f}s ({len(state.parked)} parked)",
                level=logging.ERROR,
            )
        if self.policy.gap is GapPolicy.WAIT:
            return state
        missing, new = verdicts.gap_skipped(state)
        if not (yield from self._seen.save(group, new, state)):
            return (yield from self._seen.load(group))
        first, last = missing
        skipped = str(first) if first == last else f"{first}-{last}"
        self._decide("gap_skipped", group, state.head, f"skipped {skipped}", level=logging.ERROR)
        return (yield from self._seen.load(group))
