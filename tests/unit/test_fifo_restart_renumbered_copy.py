"""A producer's retry renumbered in a FIFO group, whose key already ran, meets a counter that
started again (seed 132612): it is a copy of a message that ran, not one the old sequence never
reached - so it is neither run again nor dead-lettered ``fifo_sequence_restarted``, whether it
waits parked behind a gap when the new sequence begins or arrives late after that."""

from __future__ import annotations

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.core.fifo_policy import GateOutcome, GatePolicy
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.producer.publisher import Publisher
from pubsub_toolkit.stores.counters.memory import MemorySequenceCounter
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.support.sinks import RecordingSink

ORIGIN = "projects/p/topics/origin"
DLQ = "projects/p/topics/dlq"


class Stack:
    """Publishers and one consumer gate, wired by hand (a message delivered = as published)."""

    def __init__(self) -> None:
        self.sink = RecordingSink()
        self.dead_letters = RecordingSink()
        self.handled: list[str] = []
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

    def old_sequence(self) -> dict[str, Message]:
        """On one counter: "a" (#1), "b" (#2: lost, never delivered), then the producer's
        retry of "a" - its publish had timed out after Pub/Sub took it - renumbered #3 by
        the producer restarted meanwhile (a fresh Publisher on the same counter)."""
        counter = MemorySequenceCounter()
        publisher = Publisher(self.sink, ORIGIN, counter=counter)
        for key in ("a", "b"):
            publisher.publish(key.encode(), fifo_group="g", dedup_key=key)
        Publisher(self.sink, ORIGIN, counter=counter).publish(b"a", fifo_group="g", dedup_key="a")
        return {
            out.attributes["fifo_seq"]: Message(
                out.data, dict(out.attributes), message_id=f"m{out.attributes['fifo_seq']}"
            )
            for out in self.sink.on(ORIGIN)
        }

    def deliver(self, message: Message) -> GateOutcome:
        return self.gate.deliver(message, "g", int(message.attributes["fifo_seq"])).outcome

    def new_sequence(self) -> GateOutcome:
        """The group's counter started again (expired with the idle group): "n" is its #1."""
        Publisher(self.sink, ORIGIN, counter=MemorySequenceCounter()).publish(
            b"n", fifo_group="g", dedup_key="n"
        )
        out = self.sink.on(ORIGIN)[-1]
        return self.deliver(Message(out.data, dict(out.attributes), message_id="new1"))

    def dead_lettered(self) -> list[tuple[str, str]]:
        return [
            (m.attributes["dedup_key"], m.attributes["error_reason"])
            for m in self.dead_letters.on(DLQ)
        ]


def test_a_parked_copy_of_a_key_that_ran_is_not_dead_lettered_when_the_sequence_restarts() -> None:
    stack = Stack()
    old = stack.old_sequence()
    assert stack.deliver(old["1"]) is GateOutcome.PROCESSED
    assert stack.deliver(old["3"]) is GateOutcome.PARKED  # waits for #2, which never comes
    assert stack.new_sequence() is GateOutcome.PROCESSED
    assert stack.handled == ["a", "n"]
    assert stack.dead_lettered() == []  # "a" ran (once): its renumbered copy is no loss


def test_a_late_copy_of_a_key_that_ran_is_not_dead_lettered_after_the_sequence_restarted() -> None:
    stack = Stack()
    old = stack.old_sequence()
    assert stack.deliver(old["1"]) is GateOutcome.PROCESSED
    assert stack.new_sequence() is GateOutcome.PROCESSED
    assert stack.deliver(old["3"]) is GateOutcome.DUPLICATE
    assert stack.deliver(old["2"]) is GateOutcome.DEAD_LETTERED  # "b" never ran: kept
    assert stack.handled == ["a", "n"]
    assert stack.dead_lettered() == [("b", "fifo_sequence_restarted")]


def test_two_parked_copies_of_one_key_are_dead_lettered_once_when_the_sequence_restarts() -> None:
    """Seed 132734: "b" (#2) and the producer's renumbered retry of it (#3) both wait parked
    behind #1, which never comes: the restart keeps "b" on the dead-letter topic once."""
    stack = Stack()
    counter = MemorySequenceCounter()
    Publisher(stack.sink, ORIGIN, counter=counter).publish_batch(
        "g", [(b"a", {"dedup_key": "a"}), (b"b", {"dedup_key": "b"})]
    )
    Publisher(stack.sink, ORIGIN, counter=counter).publish(b"b", fifo_group="g", dedup_key="b")
    old = stack.sink.on(ORIGIN)
    for out in old[1:]:
        copy = Message(out.data, dict(out.attributes), message_id=out.attributes["fifo_seq"])
        assert stack.deliver(copy) is GateOutcome.PARKED
    assert stack.new_sequence() is GateOutcome.PROCESSED
    assert stack.handled == ["n"]
    assert stack.dead_lettered() == [("b", "fifo_sequence_restarted")]
