"""The consumer-side FIFO gate: each group strictly in ``fifo_seq`` order, once.

For a delivery of ``(group, seq)`` against the group's last-processed counter ``last``:

* ``seq <= last`` - a duplicate: ack;
* ``seq == last + 1`` - take the group's lease, run the handler, advance ``last`` (the advance
  *is* the dedup marker: one write), then run any parked successors in order;
* ``seq > last + 1`` - an early arrival: **park** it in the store and ack. Pub/Sub counts every
  nack toward the dead-letter limit, so nacking early arrivals would dead-letter healthy
  messages under reordering; parked ones are released when the gap fills. (``park=False``
  nacks instead, for payloads too big to park.)

A failing handler is retried with exponential backoff (a copy is parked; ``next_attempt_at``
in the group's state says when the sweeper may try again, so an outage of the handler's
dependency costs attempts slowly, not one a second). A handler that raises
:class:`~pubsub_toolkit.errors.TransientError` says "not my fault, try later": it backs off but
never counts toward poison; a :class:`~pubsub_toolkit.errors.RetryLater` counts, and its next
attempt is exactly its delay away (the delivery is acked: the parked copy is the retry, and the
group's later numbers wait parked behind it). After ``max_attempts`` counted failures the
message is **poison**: it goes to the dead-letter topic with its attributes and the reason,
and the group either skips it (a tombstone) or blocks until an operator skips or replays it.
Without a dead-letter topic a poison message always blocks: a skip is never silent. A gap older
than ``gap_timeout`` logs an alert and, with the ``skip`` gap policy, is passed over with
tombstones.

Two markers keep a group from stalling or losing messages:

* a **filler** (``fifo_filler`` attribute, forwarded by ingress) stands for a number that
  carries no new message - a message ingress dead-lettered, or a cancelled one: the gate
  advances past it without running the handler; and a copy of a key that already ran at a
  lower number (a producer's retry numbered again) is filled the same way (``ran_earlier``);
* a **reused number** - a different dedup key at a number already taken (a producer reusing
  numbers, a counter rolled back by its store) - is dead-lettered with
  ``fifo_sequence_reused`` and an ALERT, never acked as a duplicate (``GroupState.keys``).

A group ends where its producer said (``fifo_end="true"`` on its last number): once the gate
is past that number the group is **complete** - its record keeps the end and becomes a
tombstone that expires after ``completed_retention`` (the consumer passes ``DEDUP_TTL``) - and
a later number is dead-lettered ``fifo_after_end`` instead of being parked for ever (copies
parked past the end before it ran included), unless it is a copy of a message that already ran
(a renumbered retry: a duplicate, acked) or a filler (nothing to keep).

Every state change is a compare-and-set on the group's record, under a fencing lease, so two
consumer processes on one subscription keep each group in order and run nothing twice.

This module is the orchestration and I/O only: the policies, outcomes and every state
transition are pure functions in :mod:`.gate_rules`, and the store is read and written through
:class:`~._gate_store.SeenStore` (which repairs a group a store handed back older). It is still
about 1190 lines because what remains is one state machine - deliver (one or a batch),
sweep, the operator's skip and replay, the run loop (one number or a batch), failure handling,
the advance - whose steps share the lease token and the compare-and-set loop
of ``_update``; split further, a step would be read away from the loop it runs in. (The held
leases' bookkeeping is :mod:`._held_leases`, a group's end :mod:`._group_end`.)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from pubsub_toolkit import attributes as attr
from pubsub_toolkit import tracing
from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.consumer import gate_rules as rules
from pubsub_toolkit.consumer._gate_store import MAX_CAS_ROUNDS, SeenStore
from pubsub_toolkit.consumer._group_end import GroupEnd
from pubsub_toolkit.consumer._held_leases import Claim, HeldLeases
from pubsub_toolkit.consumer._sequences import Sequences
from pubsub_toolkit.consumer.gate_rules import (
    REASON_LATE_AFTER_SKIP,
    REASON_POISON,
    REASON_SEQUENCE_REUSED,
    REASON_STATE_EXPIRED,
    EndVerdict,
    GapPolicy,
    GateOutcome,
    GatePolicy,
    GateResult,
    PoisonPolicy,
    message_key,
    ran_earlier,
)
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor
from pubsub_toolkit.errors import (
    PermanentError,
    RetryLater,
    StaleClaimError,
    StoreUnavailableError,
    TransientError,
)
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import HANDLER_DURATION, DecisionLog
from pubsub_toolkit.stores.fifo_state.base import (
    FILLER_MARK,
    POISON_MARK,
    FifoStore,
    GroupState,
    key_digest,
    plain_digest,
)

logger = logging.getLogger(__name__)

_ADVANCE_RETRY_DELAYS = (0.1, 0.5, 1.5)
Handler = Callable[[Message], object]
# In batch mode (``batch`` > 1) the handler takes a list of consecutive messages of one group.
BatchHandler = Callable[[list[Message]], object]
Step = tuple[int, Message]  # a number and the message that runs there
# Transactional mode: the handler writes through the Firestore transaction it is given, and
# those writes commit together with the group's advance (see FirestoreFifoStore.commit_with).
TransactionalHandler = Callable[[Message, Any], object]


class TransactionalStore(Protocol):
    """A FifoStore that can commit a handler's writes together with the advance."""

    def commit_with(
        self,
        consumer: str,
        group: str,
        *,
        token: int,
        change: Callable[[GroupState], GroupState],
        writes: Callable[[Any], object],
    ) -> GroupState: ...


@dataclass
class _Found:
    """What an advance's compare-and-set met in the record (filled in by the change)."""

    parked: set[int] = field(default_factory=set)  # numbers a copy was parked at: unpark them
    displaced: set[int] = field(default_factory=set)  # numbers another message's copy holds


class EarlyArrivalError(TransientError):
    """An early arrival in nack mode (``park=False``): deliver it again later."""


class HandlerFailedError(TransientError):
    """The handler failed below the poison limit: deliver the message again."""


class FifoGate:
    """Runs ``handler`` for each group's messages in sequence order, exactly once."""

    def __init__(
        self,
        store: FifoStore,
        *,
        consumer: str,
        handler: Handler,
        dead_letters: DeadLetterer | None = None,
        policy: GatePolicy | None = None,
        clock: Clock = SYSTEM_CLOCK,
        log: DecisionLog | None = None,
        transactional_handler: TransactionalHandler | None = None,
        batch: int = 1,
    ) -> None:
        """``handler`` runs each message; or, with a store that supports it (Firestore),
        ``transactional_handler(message, transaction)`` writes through the transaction and
        those writes commit together with the advance of ``last_processed``.

        With ``batch`` > 1 either handler takes a **list** of 1 to ``batch`` consecutive
        messages of one group instead of one message, and the group advances once per list
        (one state write for the batch): consecutive parked numbers run together, and so do
        the consecutive deliveries handed to :meth:`deliver_batch`."""
        if transactional_handler is not None and not hasattr(store, "commit_with"):
            raise ValueError("transactional mode needs a store with commit_with (Firestore)")
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ValueError(f"batch must be an integer >= 1, not {batch!r}")
        self.batch = batch
        self._store = store
        self.consumer = consumer
        self._handler = handler
        self._transactional_handler = transactional_handler
        self._dead_letters = dead_letters
        self.policy = policy or GatePolicy()
        self._clock = clock
        self.log = log or DecisionLog(consumer)
        # Makes a dead-lettering happen once per copy (the consumer's processor sets it).
        self.rejections: IdempotentProcessor | None = None
        # The store as this process has seen it: a read that went back is repaired there.
        self._seen = SeenStore(
            store,
            consumer,
            clock,
            decide=self._decision,
            keep_reissued=self._reused,
            dead_letter=self._dead_letter,
            date=self._dated,
            held=self._holds,
        )
        # Leases this process keeps between a group's deliveries (policy.lease_hold).
        self._held = HeldLeases(self.policy, clock)
        self._end = GroupEnd(store, self._seen, consumer, self._decision, self._dead_letter)
        # A counter that started again (a new epoch) starts the group's sequence again.
        self._sequences = Sequences(
            self._seen,
            store,
            consumer,
            clock,
            self._decision,
            self._dead_letter,
            self.policy.lease,
            self._holds,
            self._running_here,
        )

    @property
    def store(self) -> FifoStore:
        """The FIFO store this gate keeps its groups in (for gauges and operators)."""
        return self._store

    # --- deliveries ---------------------------------------------------------------------

    def deliver(self, message: Message, group: str, seq: int) -> GateResult:
        """Handle one delivery. Returns when it may be acked; raises TransientError to nack."""
        digest = key_digest(message_key(message))
        stored_copy = False
        for _ in range(MAX_CAS_ROUNDS):
            met = self._sequences.meet(group, self._seen.load(group), message, seq)
            if not isinstance(met, GroupState):
                if met is None:
                    continue  # the record moved: decide again
                return met
            state, now = met, self._clock.now()
            if state.key_of(seq) is not None and not state.records(seq, digest):
                return self._reused(message, group, seq, state)
            if self._seen.ran.reused(group, state, seq, digest):  # past the state's 64 keys
                return self._reused(message, group, seq, state)
            if seq <= state.last_processed:
                if stored_copy:  # parked by an earlier turn of this loop, then overtaken
                    self._store.unpark(self.consumer, group, seq)
                if state.dead_lettered_poison(seq) == digest:
                    # This very message was skipped as poison and dead-lettered then: a copy
                    # redelivered since is no late arrival - say where it is, send nothing again.
                    self._decision("duplicate", group, seq, "already dead-lettered as poison")
                    return GateResult(GateOutcome.DEAD_LETTERED, group, seq)
                if state.is_skipped(seq) and not attr.is_filler(message):
                    # It was given up on (gap or operator skip) and arrived after all: it was
                    # never processed, so it is not a duplicate - keep it, with the reason.
                    self._dead_letter(
                        message,
                        group,
                        seq,
                        REASON_LATE_AFTER_SKIP,
                        f"{group}#{seq} arrived after the group had skipped it",
                    )
                    return GateResult(GateOutcome.DEAD_LETTERED, group, seq)
                self._decision("duplicate", group, seq, "already processed")
                return GateResult(GateOutcome.DUPLICATE, group, seq)
            if rules.forgotten_after_expiry(
                state, message, now=now, retention=self.policy.completed_retention
            ):
                return self._after_expiry(message, group, seq)
            verdict = rules.after_end(state, seq, message)
            if verdict is not EndVerdict.OPEN:
                if stored_copy:  # parked by an earlier turn of this loop, then the group ended
                    self._store.unpark(self.consumer, group, seq)
                return self._end.after_end(message, group, seq, state, verdict)
            at_head = seq == state.head
            if at_head and self._held.holds(group):
                # This process kept the lease since the group's last advance: run under it
                # (no lease write: the advance renews it), or under a new one if it is old.
                leased = self._held_lease(group, state, now, digest)
                if leased is None:
                    continue  # no longer ours, or the state moved: decide again
                return self._run(group, [(seq, message)], leased, from_park=False)
            waiting = at_head and self._busy(group, state, now)
            if seq > state.head or state.blocked_at is not None or waiting:
                # Early, blocked, backing off, or this very number is being run elsewhere: keep
                # a copy. (Acking a copy of a running head without parking it would lose the
                # message if that worker died: its own copy may come back after our ack.)
                stored_copy = True
                parked = self._park(message, group, seq, digest, state, now)
                if parked is None:
                    continue  # the state moved under us: decide again
                return parked
            leased = self._take_lease(group, state, now, digest)
            if leased is None:
                continue
            return self._run(group, [(seq, message)], leased, from_park=False)
        raise TransientError(f"{group}#{seq}: the group's state kept changing; try again")

    def deliver_batch(
        self, group: str, deliveries: Sequence[tuple[Message, int]]
    ) -> list[GateResult | Exception]:
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
                    self._deliver_run(group, deliveries, pending, results)
                except Exception as exc:
                    if not results:
                        raise  # nothing settled yet: the caller nacks the batch whole
                    # Some are settled: never nack them with the rest - each one alone now.
                    number = deliveries[pending[0]][1]
                    self._decision("batch_stopped", group, number, f"{type(exc).__name__}: {exc}")
                if pending[0] in results:
                    pending = [i for i in pending if i not in results]
                    continue
            i = pending.pop(0)
            message, seq = deliveries[i]
            try:
                results[i] = self.deliver(message, group, seq)
            except Exception as exc:  # the caller nacks it, and logs why
                results[i] = exc
        return [results[i] for i in range(len(deliveries))]

    def _deliver_run(
        self,
        group: str,
        deliveries: Sequence[tuple[Message, int]],
        order: list[int],
        results: dict[int, GateResult | Exception],
    ) -> None:
        """Run the consecutive deliveries from the group's head as one batch, if there are at
        least two and the group's lease can be had; their results go into ``results``. Raises
        what the store raised before the run."""
        state = self._seen.load(group)
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
            leased = self._held_lease(group, state, now, first_digest)
        if leased is None:
            leased = self._take_lease(group, state, now, first_digest)
        if leased is None:
            return  # someone else runs the group: one by one, they park
        steps = [(deliveries[i][1], deliveries[i][0]) for i in run]
        try:
            result = self._run(group, steps, leased, from_park=False)
        except StaleClaimError as exc:
            # Fenced after the handler ran (``_outlived`` named each number): the run's
            # deliveries get the failure, as ``deliver`` gives it for one number. Judged alone
            # now, its numbers - not recorded - would run again at once in this very process,
            # which has just run them (simulation seed 12956).
            self._decision("batch_stopped", group, steps[0][0], f"{type(exc).__name__}: {exc}")
            for i in run:
                results[i] = exc
            return
        except Exception as exc:
            # One number of the batch failed on its own (its copy is parked for the retry) or
            # the store failed: each delivery is then judged alone - processed ones are
            # duplicates now, the failed one is retrying, the rest wait parked behind it.
            self._decision("batch_stopped", group, steps[0][0], f"{type(exc).__name__}: {exc}")
            return
        if result.outcome is GateOutcome.PROCESSED:
            for i in run:
                results[i] = GateResult(GateOutcome.PROCESSED, group, deliveries[i][1])

    def sweep(self, group: str) -> GateResult:
        """Periodic work for one group: run a parked head, act on an expired gap."""
        state = self._seen.load(group)
        now = self._clock.now()
        held = self._held.holds(group) and state.blocked_at is None and not state.complete
        if held and state.head in state.parked:
            # Another process's copy of the head waits for the lease this process holds.
            return self._run_parked_head(group, state)
        if held and state.parked:
            # A gap opened behind the lease this process holds: give it back (one write), so
            # an operator can skip the missing number and any process can run it.
            if self._held.claim(group, state, now) is not Claim.NONE:
                self._release(group, state.lease_token)
            state = self._seen.load(group)
        if state.complete:
            # Nothing runs in a complete group; copies parked past its end (a crash between
            # the end and their dead-lettering) are settled here.
            self._end.settle(group, state)
            return GateResult(GateOutcome.IDLE, group, state.head)
        busy = self._busy(group, state, now)
        if state.blocked_at is not None or busy or not state.parked:
            return GateResult(GateOutcome.IDLE, group, state.head)
        if state.head not in state.parked:
            state = self._on_gap(group, state, now)
            if state.head not in state.parked:
                return GateResult(GateOutcome.IDLE, group, state.head)
        return self._run_parked_head(group, state)

    def _run_parked_head(self, group: str, state: GroupState) -> GateResult:
        """Run the group's parked head, under the lease this process holds or one taken now;
        a head listed but not stored is repaired or forgotten first."""
        now = self._clock.now()
        # The listed message's copy (re-parked from this process's own if the store lost it).
        message = self._seen.parked(group, state, state.head)
        if message is None:
            # Listed as parked but not stored (a crash between the two writes): forget it, so
            # the gap logic - not a lease held for nothing - decides what happens next.
            head = state.head
            self._seen.save(group, rules.without_lost_parked(state, head), state)
            self._decision(
                "parked_lost",
                group,
                head,
                "ALERT: listed as parked but not stored (lost by the store, or a crash between "
                "the two writes); seek the subscription back or skip it",
                level=logging.ERROR,
                alert="parked_lost",
            )
            return GateResult(GateOutcome.IDLE, group, head)
        digest = key_digest(message_key(message))
        leased = self._held_lease(group, state, now, digest) if self._held.holds(group) else None
        if leased is None:
            leased = self._take_lease(group, state, now, digest)
        if leased is None:
            return GateResult(GateOutcome.IDLE, group, state.head)
        return self._run(group, [(state.head, message)], leased, from_park=True)

    # --- operator actions -----------------------------------------------------------------

    def skip(self, group: str, seq: int, *, run: bool = True) -> GroupState:
        """Pass over ``seq`` (a poison or lost message) with a tombstone; then, with ``run``,
        resume the group here (an operator's CLI leaves that to the consumer's sweeper)."""
        # Skipping the marked end ends the group all the same (the number's copy says so).
        parked = self._store.parked_message(self.consumer, group, seq)
        end = parked is not None and attr.is_end_of_group(parked)
        while True:
            state = self._seen.load(group)
            if state.complete:
                raise ValueError(f"group {group!r} is complete (ended at {state.end_seq})")
            if seq != state.head:
                raise ValueError(f"group {group!r} waits for {state.head}; cannot skip {seq}")
            if state.blocked_at is None and state.lease_live(self._clock.now()):
                raise ValueError(f"{group!r} #{seq} is being processed right now; not skipped")
            # A new lease token fences any worker that still thinks it runs this number.
            new = rules.operator_skipped(
                state,
                seq,
                end=end,
                now=self._clock.now(),
                retention=self.policy.completed_retention,
            )
            if self._seen.save(group, new, state):
                break
        self._store.unpark(self.consumer, group, seq)
        self._decision("skipped", group, seq, "skipped by operator", level=logging.WARNING)
        if run:
            self.sweep(group)
        return self._seen.load(group)

    def replay(self, group: str, *, run: bool = True) -> GateResult:
        """Unblock a group and give its parked head (the poison message) fresh attempts; with
        ``run``, run it now, else the consumer's sweeper runs it next."""
        while True:
            state = self._seen.load(group)
            new = rules.replayed(state)
            if self._seen.save(group, new, state):
                break
        self._decision("replayed", group, state.head, "replay requested by operator")
        if not run:
            return GateResult(GateOutcome.IDLE, group, state.head)
        return self.sweep(group)

    def groups(self) -> list[str]:
        """The groups a sweep visits: those needing attention (parked or blocked work, as the
        store lists them and as this process saw them) - O(groups with work), however many
        groups went idle. (A held lease needs no visit: unused, it expires by itself.)"""
        return self._seen.groups()

    def use_lease_hold(self, hold: timedelta) -> None:
        """Hold leases between a group's deliveries for ``hold`` (see ``GatePolicy``), unless
        the policy already chose; the streaming ``Consumer`` calls it before it starts."""
        if self.policy.lease_hold is None:
            self.policy = replace(self.policy, lease_hold=hold)
            self._held = HeldLeases(self.policy, self._clock)

    def release_held(self) -> None:
        """Give back every lease this process holds between deliveries (a consumer stopping):
        another process then runs those groups at once instead of after the lease."""
        for group, token in self._held.take_all().items():
            self._release(group, token)

    # --- held leases ----------------------------------------------------------------------

    def _held_lease(
        self, group: str, state: GroupState, now: datetime, digest: str
    ) -> GroupState | None:
        """``state`` leased to this run through the lease this process holds on ``group``: as
        it is if fresh, else renewed by one write (a new fencing token - the lease is ours and
        unused, so nobody else can hold it); None if it is not ours any more or the state
        moved (the caller decides again)."""
        claim = self._held.claim(group, state, now)
        if claim is Claim.FREE:
            return state
        if claim is Claim.RENEW:
            renewed = self._seen.save(
                group, rules.leased(state, digest, now=now, lease=self.policy.lease), state
            )
            if renewed is None:
                # The record moved (someone parked a copy): the lease is still ours, so keep
                # holding it; the caller reads the record again and decides.
                self._held.hold(group, state.lease_token)
            return renewed
        return None

    def _busy(self, group: str, state: GroupState, now: datetime) -> bool:
        """The group's head waits: leased, backing off, or run by this process past its lease."""
        return state.lease_live(now) or state.backing_off(now) or self._held.busy(group)

    def _running_here(self, group: str) -> bool:
        """Whether this process is running one of ``group``'s numbers now (``_held`` is
        replaced by :meth:`use_lease_hold`, so it is looked up at each call)."""
        return self._held.busy(group)

    def _holds(self, group: str) -> bool:
        # Read at each call: use_lease_hold replaces self._held.
        return self._held.holds(group)

    def _release(self, group: str, token: int) -> None:
        try:
            self._release_lease(group, token)
        except StaleClaimError:
            pass  # fenced meanwhile (an operator, a takeover after expiry): not ours to free
        except (StoreUnavailableError, TransientError) as exc:
            # Not given back: it expires on its own after the lease; say so.
            self._decision("lease_not_released", group, 0, f"held lease left to expire: {exc}")

    def _dated(self, state: GroupState) -> GroupState:
        """``state`` as written: an idle group's record expires a retention from now."""
        return rules.dated(state, now=self._clock.now(), retention=self.policy.completed_retention)

    def _after_expiry(self, message: Message, group: str, seq: int) -> GateResult:
        """A delivery older than the retention for a group without a record: its record may
        have expired after this very message ran, so it is kept, never run again."""
        if attr.is_filler(message):
            self._decision("filled", group, seq, "a filler for a group whose record expired")
            return GateResult(GateOutcome.FILLED, group, seq)
        detail = (
            f"{group}#{seq} was published over {self.policy.completed_retention} ago and the "
            "group has no record: it may have run before the record expired"
        )
        self._decision("state_expired", group, seq, detail, level=logging.WARNING)
        self._dead_letter(message, group, seq, REASON_STATE_EXPIRED, detail)
        return GateResult(GateOutcome.DEAD_LETTERED, group, seq)

    # --- internals ------------------------------------------------------------------------

    def _park(  # noqa: PLR0917 - one private call site, every argument is needed
        self,
        message: Message,
        group: str,
        seq: int,
        digest: str,
        state: GroupState,
        now: datetime,
    ) -> GateResult | None:
        if not self.policy.park and state.blocked_at is None and seq > state.head:
            self._decision("early_nacked", group, seq, f"early (waiting for {state.head}); nack")
            raise EarlyArrivalError(f"{group}#{seq} is early; waiting for {state.head}")
        if not self._park_copy(group, seq, message, digest):
            # Another message got its copy stored at this number first: that one holds it.
            return self._reused(message, group, seq, state)
        new = rules.with_arrival_parked(state, seq, digest, now=now)
        if seq in state.parked:  # a redelivered copy: the parked one stands for it
            retrying = seq == state.head and state.backing_off(now)
            return GateResult(GateOutcome.RETRYING if retrying else GateOutcome.PARKED, group, seq)
        if not self._seen.save(group, new, state):
            return None
        if seq == state.head and state.blocked_at is None:
            if state.backing_off(now):
                self._decision("retry_scheduled", group, seq, "backing off; copy parked")
                return GateResult(GateOutcome.RETRYING, group, seq)
            self._decision("in_progress", group, seq, "being processed elsewhere; copy parked")
            return GateResult(GateOutcome.IN_PROGRESS, group, seq)
        self._decision("parked", group, seq, f"early; waiting for {state.head}")
        outcome = GateOutcome.BLOCKED if state.blocked_at is not None else GateOutcome.PARKED
        return GateResult(outcome, group, seq)

    def _reused(self, message: Message, group: str, seq: int, state: GroupState) -> GateResult:
        """A different message at a number already taken: keep it, with the reason, and alert."""
        detail = (
            f"{group}#{seq} already belongs to another dedup key (last processed "
            f"{state.last_processed}): a producer reused the number, or the counter's store "
            "lost writes"
        )
        self._decision("sequence_reused", group, seq, f"ALERT: {detail}", level=logging.ERROR)
        self._dead_letter(message, group, seq, REASON_SEQUENCE_REUSED, detail)
        return GateResult(GateOutcome.DEAD_LETTERED, group, seq)

    def _park_copy(self, group: str, seq: int, message: Message, digest: str) -> bool:
        """Park an arrival (``digest`` its key's); True only if the stored copy is this message
        (a store keeps the first copy of a number, and the state must name the same one)."""
        self._store.park(self.consumer, group, seq, message)
        stored = self._store.parked_message(self.consumer, group, seq)
        if stored is not None and key_digest(message_key(stored)) != digest:
            return False
        self._seen.remember_parked(group, seq, message)
        return True

    def _dead_letter(
        self, message: Message, group: str, seq: int, reason: str, detail: str
    ) -> None:
        """Dead-letter ``message``; without a dead-letter topic refuse to ack it at all."""
        dead_letters = self._dead_letters
        if dead_letters is None:
            raise PermanentError(reason, f"{detail} (and no dead-letter topic is configured)")

        def send() -> str:
            return dead_letters.send(message, reason, detail, dedup_key=f"{group}#{seq}")

        if self.rejections is None:
            send()
            return
        # Once per copy - (number, sequence, message) - whatever the reason, however often it is
        # redelivered: a repair that finds a lost sequence's copy cannot tell whether another
        # process dead-lettered it already, maybe for another reason (past the group's end).
        digest = key_digest(message_key(message))
        epoch = message.attributes.get(attr.FIFO_EPOCH, "")
        self.rejections.process(f"dead_letter:{group}#{seq}@{epoch}:{digest}", digest, send)

    def _take_lease(
        self, group: str, state: GroupState, now: datetime, digest: str
    ) -> GroupState | None:
        if state.blocked_at is not None or state.lease_live(now) or self._held.busy(group):
            return None  # someone runs the group, or an operator must act first
        leased = rules.leased(state, digest, now=now, lease=self.policy.lease)
        return self._seen.save(group, leased, state)

    def _run(
        self, group: str, steps: list[Step], state: GroupState, *, from_park: bool
    ) -> GateResult:
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
                    state, outcome, stop = self._run_one(group, token, steps[0], state, from_park)
                else:
                    state, outcome, stop = self._run_batch(group, token, steps, state, from_park)
                first_outcome = first_outcome or outcome
                if stop:
                    return GateResult(first_outcome, group, first, released)
                if state.complete:
                    # The marked end is behind the group: nothing after it runs (its lease is free).
                    last = state.last_processed
                    self._decision("completed", group, last, "the group's last number (fifo_end)")
                    self._end.settle(group, state)
                    return GateResult(first_outcome, group, first, released)
                if state.lease_until is None:
                    return GateResult(first_outcome, group, first, released)  # lease freed
                steps = self._parked_steps(group, state)
                if not steps:
                    if self._held.enabled:
                        self._held.hold(group, token)  # for the group's next delivery
                    else:
                        self._release_lease(group, token, known=state)
                    return GateResult(first_outcome, group, first, released)
                from_park = True
                released += len(steps)

    def _run_one(
        self, group: str, token: int, step: Step, state: GroupState, from_park: bool
    ) -> tuple[GroupState, GateOutcome, bool]:
        """Run one number; (state, outcome, whether the run stops here). A message run from
        another's delivery (released from the park) or a sweep gets a span in its own trace."""
        with tracing.handling(step[1], self.consumer, hop="consumer", unless_current=True):
            return self._run_number(group, token, step, state, from_park)

    def _run_number(
        self, group: str, token: int, step: Step, state: GroupState, from_park: bool
    ) -> tuple[GroupState, GateOutcome, bool]:
        seq, message = step
        ran_before = ran_earlier(state, seq, message)
        if ran_before is None:  # further back than the state's keys: as this process saw it
            ran_before = self._seen.ran.earlier(group, state, seq, message)
        filled = attr.is_filler(message) or ran_before is not None
        found = _Found()
        try:
            state = self._handle_and_advance(
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
            state, stop = self._on_failure(
                group, seq, message, token=token, exc=exc, from_park=from_park
            )
            return state, stop or GateOutcome.DEAD_LETTERED, stop is not None
        if from_park or found.parked:  # a copy is stored (the common case has none)
            self._store.unpark(self.consumer, group, seq)
        if filled:
            why = message.attributes.get(attr.FIFO_FILLER) or (
                f"the same dedup key had its turn at #{ran_before}"
            )
            self._decision("filled", group, seq, f"no new message at this number ({why})")
            return state, GateOutcome.FILLED, False
        self._decision("processed", group, seq, "processed in order")
        return state, GateOutcome.PROCESSED, False

    def _run_batch(
        self, group: str, token: int, steps: list[Step], state: GroupState, from_park: bool
    ) -> tuple[GroupState, GateOutcome, bool]:
        """Run consecutive numbers as one handler call and one advance past them all.

        If the handler fails, nothing is counted against anyone yet: the batch's numbers run
        again one at a time (each a list of one), so a poison message is found and handled
        alone and its neighbours are not blamed. (A batch handler must therefore be all or
        nothing - one transaction - or its effects for the numbers before the failing one
        happen twice.)"""
        found = _Found()
        numbers = f"#{steps[0][0]}-#{steps[-1][0]}"
        try:
            state = self._handle_and_advance_batch(group, token, steps, known=state, found=found)
        except (StaleClaimError, StoreUnavailableError) as exc:
            self._outlived(group, steps, exc)
            raise  # as for one number: not the handler's failure
        except RetryLater as exc:
            # The handler's own decision for the whole batch, not a failure to narrow down:
            # the head waits the delay (a counted attempt, as one by one) and the rest wait
            # parked behind it - running them again one at a time now would ignore the delay.
            head, message = steps[0]
            state, waits = self._on_failure(
                group, head, message, token=token, exc=exc, from_park=from_park
            )
            return state, waits or GateOutcome.DEAD_LETTERED, waits is not None
        except Exception as exc:
            self._decision(
                "batch_failed",
                group,
                steps[0][0],
                f"batch {numbers} failed ({type(exc).__name__}: {exc}); one at a time",
                level=logging.WARNING,
            )
            outcome: GateOutcome | None = None
            for step in steps:
                state, one, stop = self._run_one(group, token, step, state, from_park)
                outcome = outcome or one
                if stop:
                    return state, outcome, True
            return state, outcome or GateOutcome.PROCESSED, False
        for seq, _message in steps:
            if from_park or seq in found.parked:
                self._store.unpark(self.consumer, group, seq)
            self._decision("processed", group, seq, f"processed in order (batch {numbers})")
        return state, GateOutcome.PROCESSED, False

    def _outlived(self, group: str, steps: list[Step], exc: Exception) -> None:
        """Said for each of ``steps`` whose run ended fenced (``exc``: the handler outlived the
        lease and another worker took the group over, or an operator skipped it): it ran here,
        and the worker that holds the group now may run it again."""
        for seq, message in steps if isinstance(exc, StaleClaimError) else ():
            self._decision(
                "lease_outlived",
                group,
                seq,
                f"ALERT: ran here, then fenced ({exc}): it may run again elsewhere",
                level=logging.ERROR,
                dedup_key=message_key(message),
                alert="lease_outlived",
            )

    def _parked_steps(self, group: str, state: GroupState) -> list[Step]:
        """The parked head to run next - with, in batch mode, the consecutive parked numbers
        after it that can join its batch; [] if the head is not parked (or not stored)."""
        head = state.head
        message = self._seen.parked(group, state, head) if head in state.parked else None
        if message is None:
            return []
        steps: list[Step] = [(head, message)]
        if self.batch == 1 or not self._batchable(group, state, head, message, set()):
            return steps
        digests = {key_digest(message_key(message))}
        while len(steps) < self.batch and steps[-1][0] + 1 in state.parked:
            seq = steps[-1][0] + 1
            following = self._seen.parked(group, state, seq)
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
    ) -> tuple[GroupState, GateOutcome | None]:
        """Count the failure; poison past the limit. Returns (state, outcome if we stop).

        A handler's ``RetryLater`` is a counted attempt whose next one is exactly its delay
        away; its delivery is acked (the parked copy is the retry, the group holds its place).
        """
        counts = rules.counts_as_attempt(exc)
        state = self._update(group, token, lambda s: rules.failure_counted(s, counts=counts))
        if state.attempts < self.policy.max_attempts:
            now = self._clock.now()
            retry_at = rules.next_attempt_at(self.policy, state.attempts, now=now, exc=exc)
            asked = isinstance(exc, RetryLater)
            self._decision(
                "retry_later" if asked else "handler_failed",
                group,
                seq,
                f"attempt {state.attempts} of {self.policy.max_attempts} "
                f"{'asked to retry later' if asked else 'failed'} "
                f"({'counted' if counts else 'transient, not counted'}); next in "
                f"{(retry_at - now).total_seconds():.0f}s: {exc}",
                level=logging.INFO if asked else logging.WARNING,
            )
            if not from_park:
                self._seen.park_run(group, seq, message)  # kept for the sweeper
            digest = key_digest(message_key(message))
            self._update(group, token, lambda s: rules.retry_later(s, seq, digest, at=retry_at))
            if not from_park and not asked:
                raise HandlerFailedError(f"{group}#{seq} failed: {exc}") from exc
            return state, GateOutcome.RETRYING  # the sweeper retries when it is due
        detail = f"handler failed {state.attempts} times: {type(exc).__name__}: {exc}"
        if self._dead_letters is not None and self.policy.poison is PoisonPolicy.SKIP:
            self._dead_letters.send(message, REASON_POISON, detail, dedup_key=f"{group}#{seq}")
            poisoned = POISON_MARK + key_digest(message_key(message))
            state = self._advance(
                group,
                token,
                seq,
                skipped=(seq,),
                digest=poisoned,
                end=attr.is_end_of_group(message),  # a poison end still ends the group
            )
            self._store.unpark(self.consumer, group, seq)
            self._decision("poison_skipped", group, seq, detail, level=logging.ERROR)
            return state, None  # go on with the parked successors
        if self._dead_letters is not None:
            self._dead_letters.send(message, REASON_POISON, detail, dedup_key=f"{group}#{seq}")
        else:
            # Skipping without a dead-letter copy would lose the message silently: block.
            detail += " (no dead-letter topic: blocked instead of skipped)"
        # The ALERT first: should the write below time out after applying, the group is
        # blocked all the same, and the operator must have been told.
        self._decision(
            "poison_blocked", group, seq, f"ALERT: group blocked; {detail}", level=logging.ERROR
        )
        self._seen.park_run(group, seq, message)  # kept for an operator's replay
        digest = key_digest(message_key(message))
        self._update(group, token, lambda s: rules.blocked(s, seq, digest))
        return state, GateOutcome.DEAD_LETTERED if self._dead_letters else GateOutcome.BLOCKED

    def _on_gap(self, group: str, state: GroupState, now: datetime) -> GroupState:
        if not rules.gap_expired(state, now=now, timeout=self.policy.gap_timeout):
            return state
        assert state.gap_since is not None  # gap_expired says so
        age = (now - state.gap_since).total_seconds()
        self._decision(
            "gap_timeout",
            group,
            state.head,
            f"ALERT: {state.head} missing for {age:.0f}s ({len(state.parked)} parked)",
            level=logging.ERROR,
        )
        if self.policy.gap is GapPolicy.WAIT:
            return state
        missing, new = rules.gap_skipped(state)
        if not self._seen.save(group, new, state):
            return self._seen.load(group)
        self._decision("gap_skipped", group, state.head, f"skipped {missing}", level=logging.ERROR)
        return self._seen.load(group)

    def _handle_and_advance(
        self,
        group: str,
        token: int,
        seq: int,
        message: Message,
        *,
        run_handler: bool,
        known: GroupState,
        found: _Found,
    ) -> GroupState:
        """Run the handler for ``seq`` and advance past it - in one transaction if configured.

        ``known`` is the state this worker last wrote (see ``_update``); ``found`` is filled
        with what the advance met in the record."""
        if not run_handler or attr.is_filler(message):
            return self._advance_after_effect(group, token, seq, message, known, found)
        if self._transactional_handler is not None:
            change = self._advance_change(
                seq,
                skipped=(),
                digest=key_digest(message_key(message)),
                end=attr.is_end_of_group(message),
                found=found,
                hold=self._held.enabled,
            )
            committed = self._commit_with_handler(group, token, change, self._one(message))
            if found.displaced:
                self._dead_letter_displaced(group, seq, key_digest(message_key(message)))
            return committed
        self._timed(self._one(message))
        return self._advance_after_effect(group, token, seq, message, known, found)

    def _timed(self, taken: Any) -> None:
        """The handler's call, its duration counted (``handler_seconds``) when it returns."""
        started = time.perf_counter()
        self._handler(taken)
        self.log.metrics.observe(HANDLER_DURATION, time.perf_counter() - started)

    def _commit_with_handler(
        self, group: str, token: int, change: Callable[[GroupState], GroupState], taken: Any
    ) -> GroupState:
        """Transactional mode: the handler's writes for ``taken`` (a message, or a batch's list)
        and ``change`` commit in one Firestore transaction."""
        handler = self._transactional_handler
        assert handler is not None  # transactional mode
        store: TransactionalStore = self._store  # type: ignore[assignment]  # checked in __init__
        return self._seen.witnessed(
            store.commit_with(
                self.consumer,
                group,
                token=token,
                change=change,
                writes=lambda transaction: handler(taken, transaction),
            )
        )

    def _one(self, message: Message) -> Any:
        """What the handler takes for one message: the message, or in batch mode a list."""
        return [message] if self.batch > 1 else message

    def _handle_and_advance_batch(
        self, group: str, token: int, steps: list[Step], *, known: GroupState, found: _Found
    ) -> GroupState:
        """Run the handler once for ``steps`` and advance past them all in one write (in the
        handler's transaction in transactional mode)."""
        messages = [message for _seq, message in steps]
        digests = {seq: key_digest(message_key(message)) for seq, message in steps}
        hold = self._held.enabled
        changes = [
            self._advance_change(seq, skipped=(), digest=digests[seq], found=found, hold=hold)
            for seq, _message in steps
        ]

        def change(state: GroupState) -> GroupState:
            for step in changes:
                state = step(state)
            return state

        last = steps[-1][0]
        if self._transactional_handler is not None:
            state = self._commit_with_handler(group, token, change, messages)
        else:
            self._timed(messages)
            state = self._advance_recorded(
                group, token, change, seq=last, digest=digests[last], known=known
            )
        for seq in sorted(found.displaced):
            self._dead_letter_displaced(group, seq, digests[seq])
        return state

    def _advance_after_effect(  # noqa: PLR0917 - private, two call sites
        self,
        group: str,
        token: int,
        seq: int,
        message: Message,
        known: GroupState,
        found: _Found,
    ) -> GroupState:
        """Record the advance past ``seq`` once its effect happened, retrying a store hiccup.

        Losing this write would let ``seq`` run again once the lease expires, so a short
        outage is worth a few waits (as for a dedup ``complete``); past them the failure is an
        ALERT: the effect may repeat.
        """
        digest = key_digest(message_key(message))
        filler = message.attributes.get(attr.FIFO_FILLER, "")
        skipped = (seq,) if filler.startswith(attr.FILLER_DEAD_LETTERED) else ()
        recorded = FILLER_MARK + digest if filler else digest
        change = self._advance_change(
            seq,
            skipped=skipped,
            digest=recorded,
            found=found,
            end=attr.is_end_of_group(message),
            hold=self._held.enabled,
        )
        state = self._advance_recorded(group, token, change, seq=seq, digest=recorded, known=known)
        if found.displaced:
            self._dead_letter_displaced(group, seq, digest)
        return state

    def _advance_recorded(
        self,
        group: str,
        token: int,
        change: Callable[[GroupState], GroupState],
        *,
        seq: int,
        digest: str,
        known: GroupState,
    ) -> GroupState:
        """Write ``change`` (an advance past ``seq``, whose message's ``digest`` it records)."""
        for attempt, delay in enumerate((*_ADVANCE_RETRY_DELAYS, None)):
            try:
                if attempt > 0:
                    state = self._seen.load(group)
                    mine = state.lease_token == token and state.records(
                        seq, digest.removeprefix(FILLER_MARK)
                    )
                    if mine and state.last_processed >= seq:
                        return state  # the first attempt was applied; only its answer was lost
                # A retry reads the record: the first attempt may have applied.
                return self._update(group, token, change, known=None if attempt else known)
            except StoreUnavailableError:
                if delay is None:
                    self._decision(
                        "advance_failed",
                        group,
                        seq,
                        "ALERT: effect done but the advance was not recorded; it may repeat "
                        "after the lease",
                        level=logging.ERROR,
                        alert="advance_failed",
                    )
                    raise
                self._clock.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def _dead_letter_displaced(self, group: str, seq: int, digest: str) -> None:
        """A copy of ANOTHER message parked at ``seq`` while ours ran (it arrived while the
        number was in progress): it can never run now, so it is a reused number."""
        parked = self._store.parked_message(self.consumer, group, seq)
        if parked is None or key_digest(message_key(parked)) == digest:
            return
        try:
            self._reused(parked, group, seq, self._store.load(self.consumer, group))
        except PermanentError:
            # No dead-letter topic, and the copy was acked long ago: say so loudly.
            self._decision(
                "reused_dropped",
                group,
                seq,
                "ALERT: a different message parked at this number could not be dead-lettered "
                "(no dead-letter topic)",
                level=logging.ERROR,
                alert="reused_dropped",
            )

    def _advance_change(
        self,
        seq: int,
        *,
        skipped: tuple[int, ...],
        digest: str | None = None,
        found: _Found | None = None,
        end: bool = False,
        hold: bool = False,
    ) -> Callable[[GroupState], GroupState]:
        """The advance past ``seq``; with ``hold`` the lease stays for the group's next delivery
        (see :mod:`._held_leases`)."""

        def advance(s: GroupState) -> GroupState:
            other = s.key_of(seq) if seq in s.parked else None
            plain = None if digest is None else plain_digest(digest)
            if found is not None:
                if seq in s.parked:
                    found.parked.add(seq)
                if other is not None and other != plain:
                    found.displaced.add(seq)  # another message's copy parked while ours ran
            if s.last_processed >= seq:
                # An operator skipped past it meanwhile: never move the counter backwards.
                raise StaleClaimError(f"{self.consumer}: {seq} was passed over while it ran")
            # Dated here as well as on save: a transactional commit writes it directly.
            return self._dated(
                rules.advanced(
                    s,
                    seq,
                    skipped=skipped,
                    digest=digest,
                    now=self._clock.now(),
                    lease=self.policy.lease,
                    end=end,
                    retention=self.policy.completed_retention,
                    hold=hold,
                )
            )

        return advance

    def _advance(
        self,
        group: str,
        token: int,
        seq: int,
        *,
        skipped: tuple[int, ...],
        digest: str | None = None,
        end: bool = False,
    ) -> GroupState:
        change = self._advance_change(
            seq, skipped=skipped, digest=digest, end=end, hold=self._held.enabled
        )
        return self._update(group, token, change)

    def _release_lease(self, group: str, token: int, *, known: GroupState | None = None) -> None:
        self._update(group, token, rules.lease_released, known=known)

    def _update(
        self,
        group: str,
        token: int,
        change: Callable[[GroupState], GroupState],
        *,
        known: GroupState | None = None,
    ) -> GroupState:
        """Compare-and-set ``change`` while we still hold lease ``token``; return what we wrote.

        (Not a re-read: once our write frees the lease, the record belongs to whoever leases
        it next.) ``known`` is the state this worker last wrote, with its version: the first
        attempt compares against it without reading the record - if anyone wrote since (or
        the store lost our write), the compare-and-set fails and the record is read.
        """
        for _ in range(MAX_CAS_ROUNDS):
            if known is not None and known.version is not None:
                state, known, unread = known, None, True
            else:
                state, unread = self._seen.load(group), False
            # A repair of a store loss may have moved this run's own lease to a new token.
            token = self._seen.lease_now(group, token)
            if state.lease_token != token:
                if unread:
                    # What this run last wrote predates that repair: read the record itself
                    # before calling the lease lost (simulation seed 90643: a false fence).
                    continue
                raise StaleClaimError(
                    f"{self.consumer}/{group}: lease {token} was taken over "
                    f"(now {state.lease_token}); the handler outlived its lease"
                )
            stored = self._seen.save(group, change(state), state)
            if stored is not None:
                return stored
        raise TransientError(f"{self.consumer}/{group}: the state kept changing; try again")

    def _decision(
        self,
        outcome: str,
        group: str,
        seq: int,
        text: str,
        *,
        level: int = logging.INFO,
        dedup_key: str | None = None,
        **fields: object,
    ) -> None:
        self.log.decision(
            outcome,
            text,
            dedup_key=dedup_key,
            level=level,
            fifo_group=group,
            fifo_seq=seq,
            **fields,
        )
