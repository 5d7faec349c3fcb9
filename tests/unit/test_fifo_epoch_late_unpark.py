"""A group's counter starts again while the old sequence's last parked number is finishing on
another process: that run unparks its number *after* the advance that passed it, so a new
sequence's message parked at the same number in between (its handler asked to retry later) has
its copy taken by that late unpark. Acked then, it was gone for good once its own process
restarted (simulation seed 160824, 6 rollback_detected: L5, new #1 of g1, lost silently - the
old #1's sweep on consumer0 unparked #1 right after consumer1 parked L5 there, and consumer1
crashed before L5's retry was due). An early arrival of the new sequence parked there is exposed
the same way. The delivery that displaced the old sequence's copy is nacked instead: its
redelivery parks the copy again, and it runs in its turn."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.core.fifo_policy import GateOutcome
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.errors import RetryLater, TransientError
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.stores.fifo_state.base import GroupState
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.support.sinks import RecordingSink
from tests.unit.test_fifo_gate import DLQ, keyed

OLD, NEW = "1796498401933106", "1796498401939965"  # the counter's epochs, before and after


class AfterAdvance(MemoryFifoStore):
    """Runs ``then`` once, right after the save that records the old sequence's number ``at``
    ran - the moment before that run's unpark (another process's delivery lands there)."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at
        self.then: Callable[[], None] = lambda: None

    def save(
        self, consumer: str, group: str, state: GroupState, expected: GroupState
    ) -> GroupState | None:
        stored = super().save(consumer, group, state, expected)
        if stored is not None and stored.epoch == int(OLD) and stored.last_processed == self.at:
            then, self.then = self.then, lambda: None
            then()
        return stored


def test_a_new_sequences_copy_survives_the_old_runs_late_unpark() -> None:
    store, clock, sink = AfterAdvance(1), ManualClock(), RecordingSink()
    handled: list[str] = []
    asked: set[str] = set()

    def handle(message: Message) -> None:
        key = message.attributes["dedup_key"]
        if key not in asked:  # each message asks once to be retried later
            asked.add(key)
            raise RetryLater(timedelta(seconds=30))
        handled.append(key)

    def process() -> FifoGate:  # a process of the consumer (a fresh one after a restart)
        log = DecisionLog("consumer-a")
        return FifoGate(
            store,
            consumer="consumer-a",
            handler=handle,
            dead_letters=DeadLetterer(sink, DLQ, log),
            clock=clock,
            log=log,
        )

    first, second = process(), process()
    old_1, new_1 = keyed("g", 1, "a", fifo_epoch=OLD), keyed("g", 1, "x", fifo_epoch=NEW)
    assert first.deliver(old_1, "g", 1).outcome is GateOutcome.RETRYING  # parked, backing off
    clock.advance(timedelta(seconds=31))
    acked: list[bool] = []

    def new_sequence_arrives() -> None:
        try:
            second.deliver(new_1, "g", 1)  # its handler asks to retry later too
        except TransientError:
            acked.append(False)  # nacked: Pub/Sub delivers it again
        else:
            acked.append(True)

    store.then = new_sequence_arrives
    assert first.sweep("g").outcome is GateOutcome.PROCESSED  # old #1 runs; then unparks #1
    # The second process restarts (its memory gone); a nacked delivery comes again, an acked
    # one never does.
    restarted = process()
    if acked == [False]:
        assert restarted.deliver(new_1, "g", 1).outcome is GateOutcome.RETRYING
    clock.advance(timedelta(seconds=31))
    restarted.sweep("g")
    assert handled == ["a", "x"]
    assert sink.on(DLQ) == []
    assert store.load("consumer-a", "g").last_processed == 1


def test_a_new_sequences_early_arrival_survives_the_old_runs_late_unpark() -> None:
    store, clock, sink = AfterAdvance(2), ManualClock(), RecordingSink()
    handled: list[str] = []
    asked: set[str] = set()

    def handle(message: Message) -> None:
        key = message.attributes["dedup_key"]
        if key == "b" and key not in asked:  # the old #2 waits parked for its retry
            asked.add(key)
            raise RetryLater(timedelta(seconds=30))
        handled.append(key)

    def process() -> FifoGate:
        log = DecisionLog("consumer-a")
        return FifoGate(
            store,
            consumer="consumer-a",
            handler=handle,
            dead_letters=DeadLetterer(sink, DLQ, log),
            clock=clock,
            log=log,
        )

    first, second = process(), process()
    old_1, old_2 = keyed("g", 1, "a", fifo_epoch=OLD), keyed("g", 2, "b", fifo_epoch=OLD)
    assert first.deliver(old_1, "g", 1).outcome is GateOutcome.PROCESSED
    assert first.deliver(old_2, "g", 2).outcome is GateOutcome.RETRYING
    clock.advance(timedelta(seconds=31))
    new_2 = keyed("g", 2, "y", fifo_epoch=NEW)  # the new sequence's #2, before its #1: early
    acked: list[bool] = []

    def new_sequence_arrives() -> None:
        try:
            second.deliver(new_2, "g", 2)
        except TransientError:
            acked.append(False)
        else:
            acked.append(True)

    store.then = new_sequence_arrives
    assert first.sweep("g").outcome is GateOutcome.PROCESSED  # old #2 runs; then unparks #2
    restarted = process()
    if acked == [False]:
        assert restarted.deliver(new_2, "g", 2).outcome is GateOutcome.PARKED
    new_1 = keyed("g", 1, "x", fifo_epoch=NEW)
    assert restarted.deliver(new_1, "g", 1).outcome is GateOutcome.PROCESSED
    restarted.sweep("g")
    assert handled == ["a", "b", "x", "y"]
    assert sink.on(DLQ) == []
    assert store.load("consumer-a", "g").last_processed == 2


def test_a_batch_head_parked_in_place_of_the_old_copy_is_nacked_too() -> None:
    """In batch mode (``FifoGate(batch=N)``) the new sequence's run asks to retry later: its head
    is parked in place of the old sequence's copy, and its delivery is nacked - not judged alone
    and acked as parked, which would leave the copy to the late unpark."""
    store, clock, sink = AfterAdvance(1), ManualClock(), RecordingSink()
    handled: list[str] = []
    asked: set[str] = set()

    def handle(messages: list[Message]) -> None:
        head = messages[0].attributes["dedup_key"]
        if head in ("a", "x") and head not in asked:  # each asks once to retry later
            asked.add(head)
            raise RetryLater(timedelta(seconds=30))
        handled.extend(m.attributes["dedup_key"] for m in messages)

    def process() -> FifoGate:
        log = DecisionLog("consumer-a")
        return FifoGate(
            store,
            consumer="consumer-a",
            handler=handle,
            dead_letters=DeadLetterer(sink, DLQ, log),
            clock=clock,
            log=log,
            batch=10,
        )

    first, second = process(), process()
    assert first.deliver(keyed("g", 1, "a", fifo_epoch=OLD), "g", 1).outcome is (
        GateOutcome.RETRYING
    )
    clock.advance(timedelta(seconds=31))
    new = [(keyed("g", n, k, fifo_epoch=NEW), n) for n, k in ((1, "x"), (2, "y"))]
    nacked: list[Message] = []

    def new_sequence_arrives() -> None:
        # New #3 comes first (early: parked) and starts the new sequence, so #1 and #2 then
        # run as one batch.
        z = keyed("g", 3, "z", fifo_epoch=NEW)
        assert second.deliver(z, "g", 3).outcome is GateOutcome.PARKED
        results = second.deliver_batch("g", new)
        nacked.extend(m for (m, _), r in zip(new, results, strict=True) if isinstance(r, Exception))

    store.then = new_sequence_arrives
    assert first.sweep("g").outcome is GateOutcome.PROCESSED  # old #1 runs; then unparks #1
    restarted = process()
    for message in nacked:  # delivered again to a restarted process
        restarted.deliver(message, "g", int(message.attributes["fifo_seq"]))
    clock.advance(timedelta(seconds=31))
    restarted.sweep("g")
    assert handled == ["a", "x", "y", "z"]
    assert store.load("consumer-a", "g").last_processed == 3
    assert sink.on(DLQ) == []
