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

This module is the synchronous driver only: every decision and the orchestration (deliver one
or a batch, sweep, skip, replay, the run loop, failures, the advance, a group's end, the repair
of a store that lost writes, held leases) are :class:`~pubsub_toolkit.core.fifo_gate.FifoCore`'s,
generators that yield effects (:mod:`pubsub_toolkit.core.fifo_effects`) and perform no I/O.
:class:`FifoGate` performs each against the sync :class:`~pubsub_toolkit.stores.fifo_state.base.
FifoStore`, the handler and the :class:`~pubsub_toolkit.dead_letters.send.DeadLetterer`, and
sends the result back (or throws the exception in); the asyncio driver
(:mod:`.gate_async`) performs the same generators, awaiting. (About 330 lines: most of them the
gate's behaviour, described here for its public API; the driver is one branch per effect.)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import Any, Protocol, TypeVar, assert_never

from pubsub_toolkit import _drive, tracing
from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.core import fifo_effects as fx
from pubsub_toolkit.core.fifo_gate import FifoCore
from pubsub_toolkit.core.fifo_parts import EarlyArrivalError, HandlerFailedError
from pubsub_toolkit.core.fifo_policy import GatePolicy, GateResult
from pubsub_toolkit.core.fifo_seen import SeenStore
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import HANDLER_DURATION, DecisionLog
from pubsub_toolkit.stores.fifo_state.base import FifoStore, GroupState

__all__ = [
    "BatchHandler",
    "EarlyArrivalError",
    "FifoGate",
    "Handler",
    "HandlerFailedError",
    "TransactionalHandler",
    "TransactionalStore",
]

T = TypeVar("T")
Handler = Callable[[Message], object]
# In batch mode (``batch`` > 1) the handler takes a list of consecutive messages of one group.
BatchHandler = Callable[[list[Message]], object]
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


def span_of(message: Message, consumer: str) -> AbstractContextManager[object]:
    """The handling span of a message the gate runs (:class:`~.fifo_effects.SpanStart`)."""
    return tracing.handling(message, consumer, hop="consumer", unless_current=True)


def span_effect(
    effect: fx.SpanStart | fx.SpanEnd, spans: list[AbstractContextManager[object]], consumer: str
) -> Any:
    """Open or close a number run's handling span: the same for both drivers (no I/O)."""
    if isinstance(effect, fx.SpanStart):
        span = span_of(effect.message, consumer)
        span.__enter__()
        spans.append(span)
        return None
    closing, error = spans.pop(), effect.error
    if error is None:
        return closing.__exit__(None, None, None)
    return closing.__exit__(type(error), error, error.__traceback__)


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
        self._store = store
        self._handler = handler
        self._transactional_handler = transactional_handler
        self._dead_letters = dead_letters
        self._clock = clock
        self.log = log or DecisionLog(consumer)
        # Makes a dead-lettering happen once per copy (the consumer's processor sets it).
        self.rejections: IdempotentProcessor | None = None
        self.core = FifoCore(
            consumer=consumer,
            decide=self.log.group_decision,
            policy=policy,
            clock=clock,
            dead_letters=dead_letters is not None,
            transactional=transactional_handler is not None,
            batch=batch,
        )
        # The frequent effects by type, each one bound method: a dict lookup per effect instead
        # of a class pattern per case in turn (the per-delivery overhead of issue 26).
        self._fast: dict[type, Callable[[Any], Any]] = {
            fx.Load: self._load,
            fx.Save: self._save,
            fx.Handle: self._handle,
            fx.ParkedMessage: self._parked_message,
            fx.Park: self._park,
            fx.Unpark: self._unpark,
        }

    @property
    def store(self) -> FifoStore:
        """The FIFO store this gate keeps its groups in (for gauges and operators)."""
        return self._store

    @property
    def consumer(self) -> str:
        return self.core.consumer

    @property
    def batch(self) -> int:
        return self.core.batch

    @property
    def policy(self) -> GatePolicy:
        return self.core.policy

    @property
    def _seen(self) -> SeenStore:
        # The core's memory of the store (tests of a store loss tell it what it wrote).
        return self.core.seen

    # --- the operations: the core's, performed here ----------------------------------------

    def deliver(self, message: Message, group: str, seq: int) -> GateResult:
        """Handle one delivery. Returns when it may be acked; raises TransientError to nack."""
        return self._perform(self.core.deliver(message, group, seq))

    def deliver_batch(
        self, group: str, deliveries: Sequence[tuple[Message, int]]
    ) -> list[GateResult | Exception]:
        """Handle several deliveries of ``group`` (``(message, seq)`` each); one result per
        delivery, in order: a GateResult means ack, an exception nack (as :meth:`deliver`).

        In batch mode the consecutive run from the group's head goes to the handler as one
        list and the group advances once past it; every other delivery - early, a duplicate,
        a filler, the run's successors after a failure - gets :meth:`deliver` on its own."""
        return self._perform(self.core.deliver_batch(group, deliveries))

    def sweep(self, group: str) -> GateResult:
        """Periodic work for one group: run a parked head, act on an expired gap."""
        return self._perform(self.core.sweep(group))

    def skip(self, group: str, seq: int, *, run: bool = True) -> GroupState:
        """Pass over ``seq`` (a poison or lost message) with a tombstone; then, with ``run``,
        resume the group here (an operator's CLI leaves that to the consumer's sweeper)."""
        return self._perform(self.core.skip(group, seq, run=run))

    def replay(self, group: str, *, run: bool = True) -> GateResult:
        """Unblock a group and give its parked head (the poison message) fresh attempts; with
        ``run``, run it now, else the consumer's sweeper runs it next."""
        return self._perform(self.core.replay(group, run=run))

    def groups(self) -> list[str]:
        """The groups a sweep visits: those needing attention (parked or blocked work, as the
        store lists them and as this process saw them) - O(groups with work), however many
        groups went idle. (A held lease needs no visit: unused, it expires by itself.)"""
        return self._perform(self.core.groups())

    def use_lease_hold(self, hold: timedelta) -> None:
        """Hold leases between a group's deliveries for ``hold`` (see ``GatePolicy``), unless
        the policy already chose; the streaming ``Consumer`` calls it before it starts."""
        self.core.use_lease_hold(hold)

    def release_held(self) -> None:
        """Give back every lease this process holds between deliveries (a consumer stopping):
        another process then runs those groups at once instead of after the lease."""
        self._perform(self.core.release_held())

    # --- the driver ----------------------------------------------------------------------

    def _perform(self, op: fx.Op[T]) -> T:
        """Run one operation of the core: each effect performed here, in order (the frequent
        ones straight by their method in ``_fast``, the rest by :meth:`_effect`)."""
        spans: list[AbstractContextManager[object]] = []
        return _drive.run_by_type(op, self._fast, lambda effect: self._effect(effect, spans))

    def _load(self, effect: fx.Load) -> GroupState:
        return self._store.load(effect.consumer, effect.group)

    def _save(self, effect: fx.Save) -> GroupState | None:
        return self._store.save(effect.consumer, effect.group, effect.state, effect.expected)

    def _handle(self, effect: fx.Handle) -> None:
        started = time.perf_counter()
        self._handler(effect.taken)
        self.log.metrics.observe(HANDLER_DURATION, time.perf_counter() - started)

    def _parked_message(self, effect: fx.ParkedMessage) -> Message | None:
        return self._store.parked_message(effect.consumer, effect.group, effect.seq)

    def _park(self, effect: fx.Park) -> None:
        self._store.park(effect.consumer, effect.group, effect.seq, effect.message)

    def _unpark(self, effect: fx.Unpark) -> None:
        self._store.unpark(effect.consumer, effect.group, effect.seq)

    def _effect(self, effect: fx.Effect, spans: list[AbstractContextManager[object]]) -> Any:
        store = self._store
        # The spans first (one pair per number run); the fast ones come here only by a caller
        # other than _perform's dispatch.
        match effect:
            case fx.SpanStart() | fx.SpanEnd():
                return span_effect(effect, spans, self.consumer)
            case fx.Groups(consumer):
                return store.groups(consumer)
            case fx.DeadLetter():
                return self._dead_letter(effect)
            case fx.Sleep(seconds):
                return self._clock.sleep(seconds)
            case fx.CommitWith():
                return self._commit_with(effect)
            case fx.Load() | fx.Save() | fx.Handle() | fx.ParkedMessage() | fx.Park() | fx.Unpark():
                return self._fast[type(effect)](effect)
            case _:
                assert_never(effect)

    def _commit_with(self, effect: fx.CommitWith) -> GroupState:
        """Transactional mode: the handler's writes and the change in one transaction."""
        handler = self._transactional_handler
        assert handler is not None  # the core asks only in transactional mode
        store: TransactionalStore = self._store  # type: ignore[assignment]  # checked in __init__
        return store.commit_with(
            effect.consumer,
            effect.group,
            token=effect.token,
            change=effect.change,
            writes=lambda transaction: handler(effect.taken, transaction),
        )

    def _dead_letter(self, effect: fx.DeadLetter) -> None:
        """Publish to the dead-letter topic - once per ``effect.once`` with rejection records."""
        dead_letters = self._dead_letters
        assert dead_letters is not None  # the core asks only with a dead-letter topic

        def send() -> str:
            return dead_letters.send(
                effect.message, effect.reason, effect.detail, dedup_key=effect.dedup_key
            )

        if effect.once is None or self.rejections is None:
            send()
            return
        self.rejections.process(effect.once, effect.digest, send)
