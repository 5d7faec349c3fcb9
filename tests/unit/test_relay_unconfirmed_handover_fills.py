"""A FIFO number whose last attempt hands the message to the operator (its hand-over task in
doubt, ``relay_handover_unconfirmed``) does not stop its group (simulation seed 79 of
``--enable relay_store_outage,relay_tasks_refused``: "g1 stopped at 3 of 4").

Cloud Tasks refused the relay's creates (transiently) while its store was down, so the last
attempt could neither release the message nor know that no task was made: it dead-lettered
nothing - right, a task made after all would release it too - but it published no filler
either, and the group waited at that number for an operator. As for a number the relay
dead-letters, a filler (``dead_lettered:relay_handover_unconfirmed``) lets the group go on; the
gate leaves a tombstone, so a copy released later - by the task, if it exists, or by the
operator's replay - is kept (``fifo_late_after_skip``), never run out of order, never lost.

The relay and the consumer's gate run on the project's in-memory stores.
"""

from __future__ import annotations

import pytest

from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.core.fifo_policy import GateOutcome
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.delay.payload import DelayedMessage
from pubsub_toolkit.delay.relay import RelayOutcome
from pubsub_toolkit.message import Message, OutboundMessage
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.support.sinks import RecordingSink
from tests.unit.test_relay_handover_outcomes import DLQ, DUE, FINAL, World, alerts, fifo_body

CONSUMER_DLQ = "projects/p/topics/consumer-dlq"
FILLER = "dead_lettered:relay_handover_unconfirmed"


class Consumer:
    """One consumer's gate over group ``g``."""

    def __init__(self, world: World) -> None:
        self.ran: list[str] = []
        self.letters = RecordingSink()
        self.gate = FifoGate(
            MemoryFifoStore(world.clock),
            consumer="c",
            handler=lambda m: self.ran.append(m.attributes["fifo_seq"]),
            dead_letters=DeadLetterer(self.letters, CONSUMER_DLQ, DecisionLog("test")),
            clock=world.clock,
        )

    def deliver(self, message: OutboundMessage) -> GateOutcome:
        seq = int(message.attributes["fifo_seq"])
        received = Message(message.data, message.attributes, ordering_key="g")
        return self.gate.deliver(received, "g", seq).outcome


def numbered(seq: int) -> OutboundMessage:
    attributes = {"dedup_key": f"k{seq}", "fifo_group": "g", "fifo_seq": str(seq)}
    return OutboundMessage(f"g#{seq}".encode(), attributes, "g")


@pytest.mark.parametrize("fault", ["fail", "quota"])
def test_a_number_handed_to_the_operator_is_filled_and_its_group_goes_on(
    fault: str, caplog: pytest.LogCaptureFixture
) -> None:
    world = World()
    world.queue.faults = [fault] * 10  # every create refused, none applied
    caplog.set_level("INFO")
    assert world.last_attempt(fifo_body(seq="2")) is RelayOutcome.RESCHEDULED
    assert world.sink.on(DLQ) == []  # never a letter beside a task that may exist
    [alert] = alerts(caplog, "relay_handover_unconfirmed")
    assert (alert["fifo_group"], alert["fifo_seq"]) == ("g", "2")
    [filler] = world.sink.on(FINAL)
    assert (filler.attributes["fifo_seq"], filler.attributes["fifo_filler"]) == ("2", FILLER)
    consumer = Consumer(world)
    outcomes = [consumer.deliver(m) for m in (numbered(1), filler, numbered(3))]
    assert outcomes == [GateOutcome.PROCESSED, GateOutcome.FILLED, GateOutcome.PROCESSED]
    assert consumer.ran == ["1", "3"]


def test_a_task_made_after_all_releases_a_copy_the_gate_keeps(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = World()
    world.queue.faults = ["timeout"] * 10  # every create applied, its reply lost
    caplog.set_level("INFO")
    assert world.last_attempt(fifo_body(seq="2")) is RelayOutcome.RESCHEDULED
    [filler] = world.sink.on(FINAL)
    consumer = Consumer(world)
    assert [consumer.deliver(m) for m in (numbered(1), filler, numbered(3))] == [
        GateOutcome.PROCESSED,
        GateOutcome.FILLED,
        GateOutcome.PROCESSED,
    ]
    # The store back, the task releases the message: once, and the gate keeps it.
    assert world.run_queued() == [RelayOutcome.PUBLISHED]
    released = [m for m in world.sink.on(FINAL) if "fifo_filler" not in m.attributes]
    assert [m.data for m in released] == [b"payload"]
    assert consumer.deliver(released[0]) is GateOutcome.DEAD_LETTERED
    assert consumer.ran == ["1", "3"]  # never run out of order
    [kept] = consumer.letters.on(CONSUMER_DLQ)
    assert kept.data == b"payload"
    assert world.sink.on(DLQ) == []


def test_the_alert_says_the_number_was_filled(caplog: pytest.LogCaptureFixture) -> None:
    world = World()
    world.queue.faults = ["fail"] * 10
    caplog.set_level("INFO")
    world.last_attempt(fifo_body(seq="2"))
    [record] = [
        r
        for r in caplog.records
        if getattr(r, "decision", {}).get("alert") == "relay_handover_unconfirmed"
    ]
    assert "fifo_late_after_skip" in record.getMessage()


def test_a_plain_message_handed_to_the_operator_has_no_filler() -> None:
    world = World()
    world.queue.faults = ["fail"] * 10
    plain = DelayedMessage(OutboundMessage(b"payload", {"dedup_key": "k"}), "k", DUE).to_json()
    assert world.last_attempt(plain) is RelayOutcome.RESCHEDULED
    assert world.sink.on(FINAL) == [] and world.sink.on(DLQ) == []
