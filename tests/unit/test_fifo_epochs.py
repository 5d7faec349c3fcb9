"""Counter epochs end to end in one process: the Publisher stamps them, refuses a counter that
went back, and the gate starts a group's sequence again when its counter did (memory stores;
the same on Redis in tests/integration/test_fifo_store_loss_redis.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pubsub_toolkit.attributes import FIFO_EPOCH
from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.core.fifo_policy import GateOutcome, GatePolicy
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.errors import RetryLater, StoreUnavailableError, TransientError
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.producer.publisher import Publisher
from pubsub_toolkit.stores.counters.base import SequenceBlock
from pubsub_toolkit.stores.counters.memory import MemorySequenceCounter
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.support.sinks import RecordingSink

ORIGIN = "projects/p/topics/origin"
DLQ = "projects/p/topics/dlq"


class RolledBackCounter:
    """A counter whose store lost its last writes but not the key: the same epoch, lower
    numbers (a failover to a replica that was behind)."""

    def __init__(self) -> None:
        self.inner = MemorySequenceCounter()
        self.lost = 0

    def reserve(self, group: str, count: int = 1) -> SequenceBlock:
        block = self.inner.reserve(group, count)
        first = max(1, block.first - self.lost)
        return SequenceBlock(group, first, first + count - 1, block.epoch)

    def current(self, group: str) -> int:
        return self.inner.current(group)


class Stack:
    """Publisher(s) and one consumer gate, wired by hand (a message delivered = as published)."""

    def __init__(self) -> None:
        self.sink = RecordingSink()
        self.dead_letters = RecordingSink()
        self.handled: list[str] = []
        self._delivered = 0
        log = DecisionLog("consumer-a")
        self.gate = FifoGate(
            MemoryFifoStore(),
            consumer="consumer-a",
            handler=lambda m: self.handled.append(m.attributes["dedup_key"]),
            dead_letters=DeadLetterer(self.dead_letters, DLQ, log),
            policy=GatePolicy(),
            clock=ManualClock(),
            log=log,
        )

    def publisher(self) -> Publisher:
        """A producer on a NEW counter: the old one expired or was lost (a new epoch)."""
        return Publisher(self.sink, ORIGIN, counter=MemorySequenceCounter())

    def deliver_new(self) -> list[GateOutcome]:
        outcomes = []
        for out in self.sink.on(ORIGIN)[self._delivered :]:
            self._delivered += 1
            message = Message(out.data, dict(out.attributes), message_id=f"m{self._delivered}")
            seq = int(out.attributes["fifo_seq"])
            outcomes.append(self.gate.deliver(message, "g", seq).outcome)
        return outcomes


def test_the_publisher_stamps_the_counters_epoch() -> None:
    sink = RecordingSink()
    Publisher(sink, ORIGIN, counter=MemorySequenceCounter()).publish(b"x", fifo_group="g")
    (published,) = sink.on(ORIGIN)
    assert int(published.attributes[FIFO_EPOCH]) > 0
    with pytest.raises(ValueError, match="fifo_epoch"):
        Publisher(sink, ORIGIN, counter=MemorySequenceCounter()).publish(
            b"x", {FIFO_EPOCH: "1"}, fifo_group="g"
        )


def test_the_publisher_refuses_a_number_below_one_it_handed_out() -> None:
    """The producer side of a counter that went back in the same epoch: nothing published
    under a number already used, the caller gets a transient error (and the log an ALERT)."""
    counter, sink = RolledBackCounter(), RecordingSink()
    publisher = Publisher(sink, ORIGIN, counter=counter)
    publisher.publish_batch("g", [(b"a", {}), (b"b", {}), (b"c", {})])
    counter.lost = 2
    with pytest.raises(StoreUnavailableError, match="went back"):
        publisher.publish(b"d", fifo_group="g").result()
    assert [m.attributes["fifo_seq"] for m in sink.on(ORIGIN)] == ["1", "2", "3"]


def test_a_counter_that_started_again_starts_the_group_again() -> None:
    """The group's record is still there (it outlives the counter by design), the counter
    started again in a new epoch: its #1.. are new messages and run - a producer's retry of a
    message that ran just before the restart, renumbered in the new sequence, does not."""
    stack = Stack()
    first = stack.publisher()
    for key in ("a", "b", "c"):
        first.publish(key.encode(), fifo_group="g", dedup_key=key)
    assert set(stack.deliver_new()) == {GateOutcome.PROCESSED}
    second = stack.publisher()
    for key in ("c", "d", "e"):  # "c" is the producer's retry of its last publish
        second.publish(key.encode(), fifo_group="g", dedup_key=key)
    assert stack.deliver_new() == [GateOutcome.FILLED, GateOutcome.PROCESSED, GateOutcome.PROCESSED]
    assert stack.handled == ["a", "b", "c", "d", "e"]
    assert stack.dead_letters.on(DLQ) == []


def test_copies_parked_in_the_old_sequence_are_dead_lettered_when_it_restarts() -> None:
    """#3 of the old sequence waits parked for #2, which will never come (its counter started
    again): the restart keeps it on the dead-letter topic with the reason, and a late #2 of
    the old sequence is dead-lettered too - neither is acked silently."""
    stack = Stack()
    stack.publisher().publish_batch("g", [(b"a", {"dedup_key": "a"}), (b"b", {"dedup_key": "b"})])
    old = stack.sink.on(ORIGIN)
    stack.publisher().publish(b"x", fifo_group="g", dedup_key="x")  # never delivered
    stack._delivered = 3
    early = Message(b"c", {**old[1].attributes, "fifo_seq": "3", "dedup_key": "c"}, message_id="c")
    assert stack.gate.deliver(Message(old[0].data, dict(old[0].attributes)), "g", 1).outcome is (
        GateOutcome.PROCESSED
    )
    assert stack.gate.deliver(early, "g", 3).outcome is GateOutcome.PARKED
    stack.publisher().publish(b"n", fifo_group="g", dedup_key="n")
    assert stack.deliver_new() == [GateOutcome.PROCESSED]
    late = Message(old[1].data, dict(old[1].attributes), message_id="b")
    assert stack.gate.deliver(late, "g", 2).outcome is GateOutcome.DEAD_LETTERED
    assert stack.handled == ["a", "n"]
    reasons = [
        (m.attributes["dedup_key"], m.attributes["error_reason"])
        for m in stack.dead_letters.on(DLQ)
    ]
    assert reasons == [("c", "fifo_sequence_restarted"), ("b", "fifo_sequence_restarted")]


def test_a_new_sequence_begun_on_a_lost_record_still_knows_what_ran_before_it() -> None:
    """The store lost the group, and its counter: another process (no memory of the group)
    adopts the new epoch on the empty record and parks its #2. This process still remembers
    that the key it ran at the old #1 ran: the producer's retry of it, renumbered #1 in the
    new sequence, is a filler - not a second run - and the new #2 runs after it."""
    store = MemoryFifoStore()
    handled: list[str] = []
    log = DecisionLog("consumer-a")

    def gate() -> FifoGate:
        return FifoGate(
            store,
            consumer="consumer-a",
            handler=lambda m: handled.append(m.attributes["dedup_key"]),
            dead_letters=DeadLetterer(RecordingSink(), DLQ, log),
            clock=ManualClock(),
            log=log,
        )

    this, other = gate(), gate()
    sink = RecordingSink()
    Publisher(sink, ORIGIN, counter=MemorySequenceCounter()).publish(
        b"k", fifo_group="g", dedup_key="k"
    )
    Publisher(sink, ORIGIN, counter=MemorySequenceCounter()).publish_batch(
        "g", [(b"k", {"dedup_key": "k"}), (b"n", {"dedup_key": "n"})]
    )
    first, retry, new = (
        Message(o.data, dict(o.attributes), message_id="m") for o in sink.on(ORIGIN)
    )
    assert this.deliver(first, "g", 1).outcome is GateOutcome.PROCESSED
    store._states.clear()  # the store lost the group
    store._parked.clear()
    assert other.deliver(new, "g", 2).outcome is GateOutcome.PARKED
    assert this.deliver(retry, "g", 1).outcome is GateOutcome.FILLED
    assert handled == ["k", "n"]


def test_a_process_that_saw_the_group_before_its_epoch_takes_a_restart_for_no_loss() -> None:
    """This process ran #1 of a group whose record had no epoch yet (a message without one).
    Another process then ran #2 of a counter's sequence (the record adopted its epoch), and
    that counter started again: the record is a new sequence at 0, the old one's end kept in
    its ``prior``. That is no store loss (seed 1113 of the simulation): this process must not
    put its old position back onto the new sequence, whose #1 has not run - it runs, once."""
    store = MemoryFifoStore()
    handled: list[str] = []
    dead_letters = RecordingSink()
    log = DecisionLog("consumer-a")

    def gate() -> FifoGate:
        return FifoGate(
            store,
            consumer="consumer-a",
            handler=lambda m: handled.append(m.attributes["dedup_key"]),
            dead_letters=DeadLetterer(dead_letters, DLQ, log),
            clock=ManualClock(),
            log=log,
        )

    this, other = gate(), gate()
    raw = Message(b"r", {"dedup_key": "r", "fifo_group": "g", "fifo_seq": "1"}, message_id="r")
    assert this.deliver(raw, "g", 1).outcome is GateOutcome.PROCESSED
    sink = RecordingSink()
    Publisher(sink, ORIGIN, counter=MemorySequenceCounter()).publish_batch(
        "g", [(b"a", {"dedup_key": "a"}), (b"b", {"dedup_key": "b"})]
    )
    Publisher(sink, ORIGIN, counter=MemorySequenceCounter()).publish_batch(
        "g", [(b"x", {"dedup_key": "x"}), (b"y", {"dedup_key": "y"})]
    )
    _, b, x, y = (Message(o.data, dict(o.attributes), message_id="m") for o in sink.on(ORIGIN))
    assert other.deliver(b, "g", 2).outcome is GateOutcome.PROCESSED
    assert other.deliver(y, "g", 2).outcome is GateOutcome.PARKED
    assert this.deliver(x, "g", 1).outcome is GateOutcome.PROCESSED
    assert handled == ["r", "b", "x", "y"]
    assert dead_letters.on(DLQ) == []


def test_a_head_retried_later_is_run_from_its_own_copy_not_a_stray_left_at_its_number() -> None:
    """A copy stored at a number no state lists any more - a store-loss repair that parked its
    copy again while another process had already run and unparked it (seed 843), or a crash
    between an advance and its unpark - must not stand in for the next message given that
    number (here #1 of a new sequence: its counter started again). The head asks to be retried
    later: its parked copy is the one the sweeper runs, so it runs - not the old #1 again (a
    duplicate, acked: the new message lost silently)."""
    store, clock = MemoryFifoStore(), ManualClock()
    handled: list[str] = []
    log = DecisionLog("consumer-a")

    def handle(message: Message) -> None:
        key = message.attributes["dedup_key"]
        if key == "x" and "x" not in handled:
            handled.append("x")
            raise RetryLater(timedelta(seconds=30))
        handled.append(key)

    gate = FifoGate(
        store,
        consumer="consumer-a",
        handler=handle,
        dead_letters=DeadLetterer(RecordingSink(), DLQ, log),
        clock=clock,
        log=log,
    )
    sink = RecordingSink()
    Publisher(sink, ORIGIN, counter=MemorySequenceCounter()).publish(
        b"a", fifo_group="g", dedup_key="a"
    )
    Publisher(sink, ORIGIN, counter=MemorySequenceCounter()).publish(
        b"x", fifo_group="g", dedup_key="x"
    )
    old, new = (Message(o.data, dict(o.attributes), message_id="m") for o in sink.on(ORIGIN))
    assert gate.deliver(old, "g", 1).outcome is GateOutcome.PROCESSED
    store.park("consumer-a", "g", 1, old)  # the stray: #1's copy, parked again after it ran
    # The copy replaced the old sequence's: nacked, as that one's run may still unpark it
    # (test_fifo_epoch_late_unpark.py); the redelivery finds it parked.
    with pytest.raises(TransientError):
        gate.deliver(new, "g", 1)
    assert gate.deliver(new, "g", 1).outcome is GateOutcome.RETRYING
    clock.advance(timedelta(seconds=31))
    assert gate.sweep("g").outcome is GateOutcome.PROCESSED
    assert handled == ["a", "x", "x"]
