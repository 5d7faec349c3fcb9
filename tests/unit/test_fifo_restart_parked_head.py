"""A group's counter starts again (a new epoch: the store lost it) while the old sequence's
head waits parked for its retry: the old head and the parked run after it were published before
the new counter began, so they run first, in order, and the new sequence waits for them - they
are not dropped (simulation seeds 8055, 15406, 22665 of the default mix, 170 of
``--enable long_pause``, 2504 of ``--enable store_restart_empty``: with no dead-letter topic
the old head went to an ALERT and never ran)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.core.fifo_policy import GateOutcome, GatePolicy
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.errors import RetryLater, TransientError
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.producer.publisher import Publisher
from pubsub_toolkit.stores.counters.memory import MemorySequenceCounter
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.support.sinks import RecordingSink

ORIGIN = "projects/p/topics/origin"
DLQ = "projects/p/topics/dlq"


@pytest.mark.parametrize("with_dead_letter_topic", [False, True])
def test_the_old_sequences_parked_head_runs_before_the_new_sequence(
    with_dead_letter_topic: bool,
) -> None:
    store, clock, log = MemoryFifoStore(), ManualClock(), DecisionLog("consumer-a")
    handled: list[str] = []
    dead_letters = RecordingSink()
    failed_once: set[str] = set()

    def handle(message: Message) -> None:
        key = message.attributes["dedup_key"]
        if key == "a" and key not in failed_once:
            failed_once.add(key)
            raise RetryLater(timedelta(seconds=30))
        handled.append(key)

    gate = FifoGate(
        store,
        consumer="consumer-a",
        handler=handle,
        dead_letters=DeadLetterer(dead_letters, DLQ, log) if with_dead_letter_topic else None,
        clock=clock,
        log=log,
    )
    sink = RecordingSink()
    Publisher(sink, ORIGIN, counter=MemorySequenceCounter()).publish_batch(
        "g", [(b"a", {"dedup_key": "a"}), (b"b", {"dedup_key": "b"})]
    )
    # The counter's store lost it: a new counter, a new epoch, numbers from 1 again.
    Publisher(sink, ORIGIN, counter=MemorySequenceCounter()).publish(
        b"n", fifo_group="g", dedup_key="n"
    )
    a, b, n = (
        Message(o.data, dict(o.attributes), message_id=o.data.decode()) for o in sink.on(ORIGIN)
    )
    assert gate.deliver(a, "g", 1).outcome is GateOutcome.RETRYING  # acked, its copy parked
    assert gate.deliver(b, "g", 2).outcome is GateOutcome.PARKED
    with pytest.raises(TransientError):
        gate.deliver(n, "g", 1)  # nacked: the old run goes first
    clock.advance(timedelta(seconds=31))
    assert gate.sweep("g").outcome is GateOutcome.PROCESSED
    assert gate.deliver(n, "g", 1).outcome is GateOutcome.PROCESSED
    assert handled == ["a", "b", "n"]
    assert dead_letters.on(DLQ) == []


def test_an_old_head_blocked_as_poison_without_a_dead_letter_topic_waits_for_the_operator() -> None:
    """With no dead-letter topic poison blocks its group until an operator skips (or replays)
    it: the gate never drops it. A counter that starts again meanwhile (the group idle past
    its counter's life: seed 170 of ``--enable long_pause``) does not drop it either - the new
    sequence waits, and runs once the operator has skipped the poison."""
    store, clock, log = MemoryFifoStore(), ManualClock(), DecisionLog("consumer-a")
    handled: list[str] = []

    def handle(message: Message) -> None:
        key = message.attributes["dedup_key"]
        if key == "p":
            raise ValueError("poison")
        handled.append(key)

    gate = FifoGate(
        store,
        consumer="consumer-a",
        handler=handle,
        policy=GatePolicy(max_attempts=1),
        clock=clock,
        log=log,
    )
    sink = RecordingSink()
    Publisher(sink, ORIGIN, counter=MemorySequenceCounter()).publish(
        b"p", fifo_group="g", dedup_key="p"
    )
    Publisher(sink, ORIGIN, counter=MemorySequenceCounter()).publish(
        b"n", fifo_group="g", dedup_key="n"
    )
    p, n = (
        Message(o.data, dict(o.attributes), message_id=o.data.decode()) for o in sink.on(ORIGIN)
    )
    assert gate.deliver(p, "g", 1).outcome is GateOutcome.BLOCKED
    with pytest.raises(TransientError):
        gate.deliver(n, "g", 1)
    assert store.load("consumer-a", "g").blocked_at == 1  # still the operator's to decide
    clock.advance(timedelta(minutes=2))  # the lease the restart took to settle it expires
    gate.skip("g", 1)
    assert gate.deliver(n, "g", 1).outcome is GateOutcome.PROCESSED
    assert handled == ["n"]


def test_a_copy_parked_behind_a_gap_without_a_dead_letter_topic_is_not_dropped_at_a_restart() -> (
    None
):
    """Old #1 never came (its producer crashed before publishing), old #2 waits parked behind
    it, and the consumer has no dead-letter topic. The counter starts again (seed 623 of
    ``--enable renumber_far,long_pause,store_restart_empty``): #2 was acked when parked and
    there is nowhere to keep it, so it is not dropped - the new sequence waits until the old
    gap is skipped (here by the operator), #2 runs, then the new #1."""
    store, clock, log = MemoryFifoStore(), ManualClock(), DecisionLog("consumer-a")
    handled: list[str] = []
    gate = FifoGate(
        store,
        consumer="consumer-a",
        handler=lambda m: handled.append(m.attributes["dedup_key"]),
        clock=clock,
        log=log,
    )
    sink = RecordingSink()
    Publisher(sink, ORIGIN, counter=MemorySequenceCounter()).publish_batch(
        "g", [(b"lost", {"dedup_key": "lost"}), (b"b", {"dedup_key": "b"})]
    )
    Publisher(sink, ORIGIN, counter=MemorySequenceCounter()).publish(
        b"n", fifo_group="g", dedup_key="n"
    )
    _, b, n = (
        Message(o.data, dict(o.attributes), message_id=o.data.decode()) for o in sink.on(ORIGIN)
    )
    assert gate.deliver(b, "g", 2).outcome is GateOutcome.PARKED
    with pytest.raises(TransientError):
        gate.deliver(n, "g", 1)
    assert store.parked_message("consumer-a", "g", 2) is not None
    gate.skip("g", 1)  # the operator, on the gap's ALERT; the sweep runs #2
    assert handled == ["b"]
    assert gate.deliver(n, "g", 1).outcome is GateOutcome.PROCESSED
    assert handled == ["b", "n"]
