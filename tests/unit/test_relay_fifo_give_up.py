"""A delayed FIFO number the relay dead-letters on Cloud Tasks' last attempt does not stop its
group: the relay follows the dead letter with a filler, as ingress does for a FIFO message it
dead-letters, and the consumer's gate passes over the number with a tombstone.

Before, the group waited at that number for an operator's ``fifo skip``; the relay gives up
days after the due time (the simulation's ``relay_store_outage``: about 3.5 days of retries),
and an operator who came after the idle group's record had expired (``DEDUP_TTL`` after its
last change) was refused: "waits for 1; cannot skip N" (seeds 110, 321 and 340 of
``--enable relay_store_outage``).

The relay and the gate run on the project's in-memory stores (the relay's behind an outage
switch, our ``DedupStore`` protocol) and a recording sink; what the relay publishes to the
final topic is delivered to the gate as Pub/Sub would deliver it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.core.fifo_policy import GateOutcome
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.delay.last_attempt import REASON_STORE_UNAVAILABLE
from pubsub_toolkit.delay.payload import DelayedMessage
from pubsub_toolkit.delay.relay import Relay, RelayOutcome
from pubsub_toolkit.errors import TransientError
from pubsub_toolkit.message import Message, OutboundMessage
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.support.sinks import RecordingSink
from tests.unit.test_relay_last_attempt import SwitchableStore

FINAL, DLQ, CONSUMER_DLQ = "projects/p/topics/final", "projects/p/topics/dlq", "projects/p/c-dlq"
MAX_ATTEMPTS = 3
DEDUP_TTL = timedelta(days=8)


def numbered(seq: int, epoch: str = "1") -> OutboundMessage:
    attributes = {"dedup_key": f"k{seq}", "fifo_group": "g", "fifo_seq": str(seq)}
    return OutboundMessage(f"g#{seq}".encode(), {**attributes, "fifo_epoch": epoch}, "g")


def delivered(message: OutboundMessage) -> Message:
    return Message(message.data, message.attributes, ordering_key=message.ordering_key)


class World:
    """One relay whose store is down through every attempt, and one consumer's gate."""

    def __init__(self, sink: RecordingSink) -> None:
        self.clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
        self.relay_store = SwitchableStore(MemoryDedupStore(self.clock))
        self.sink = sink
        self.relay = Relay(
            store=self.relay_store,
            sink=sink,
            final_topic=FINAL,
            dead_letter_topic=DLQ,
            lease=timedelta(seconds=30),
            ttl=DEDUP_TTL,
            clock=self.clock,
            task_max_attempts=MAX_ATTEMPTS,
        )
        self.ran: list[str] = []
        self.gate = FifoGate(
            MemoryFifoStore(self.clock),
            consumer="c",
            handler=lambda m: self.ran.append(m.attributes["fifo_seq"]),
            dead_letters=DeadLetterer(RecordingSink(), CONSUMER_DLQ, DecisionLog("test")),
            clock=self.clock,
        )

    def give_up_on(self, message: OutboundMessage) -> None:
        """Cloud Tasks' every attempt at ``message`` fails on the relay's store."""
        body = DelayedMessage(message, message.attributes["dedup_key"], self.clock.now()).to_json()
        self.relay_store.down = True
        for attempt in range(1, MAX_ATTEMPTS):
            with pytest.raises(TransientError):
                self.relay.release(body, attempt=attempt)
        result = self.relay.release(body, attempt=MAX_ATTEMPTS)
        assert result.outcome is RelayOutcome.DEAD_LETTERED
        self.relay_store.down = False

    def consume_final(self) -> list[GateOutcome]:
        """Deliver everything on the final topic to the gate, once each."""
        outcomes = []
        for message in self.sink.on(FINAL):
            group, seq = message.attributes["fifo_group"], int(message.attributes["fifo_seq"])
            outcomes.append(self.gate.deliver(delivered(message), group, seq).outcome)
        self.sink.published[FINAL] = []
        return outcomes


def test_a_fifo_number_dead_lettered_on_the_last_attempt_does_not_stop_its_group() -> None:
    world = World(RecordingSink())
    world.sink.publish(FINAL, numbered(1))
    assert world.consume_final() == [GateOutcome.PROCESSED]
    world.give_up_on(numbered(2))
    [dead] = world.sink.on(DLQ)
    assert (dead.attributes["error_reason"], dead.attributes["fifo_seq"]) == (
        REASON_STORE_UNAVAILABLE,
        "2",
    )
    # Days later, the group goes on by itself - no operator needed, whenever one comes.
    world.clock.advance(timedelta(days=4))
    world.sink.publish(FINAL, numbered(3))
    assert world.consume_final() == [GateOutcome.FILLED, GateOutcome.PROCESSED]
    assert world.ran == ["1", "3"]
    assert world.gate.store.load("c", "g").last_processed == 3
    # The dead-lettered message, if it arrives after all (a replay), is kept, never run late.
    late = world.gate.deliver(delivered(numbered(2)), "g", 2)
    assert late.outcome is GateOutcome.DEAD_LETTERED
    assert world.ran == ["1", "3"]


def test_an_unpublished_filler_leaves_an_alert_naming_the_number_to_skip(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class FinalTopicRefusesFillers(RecordingSink):
        def publish(self, topic: str, message: OutboundMessage) -> str:
            if topic == FINAL and "fifo_filler" in message.attributes:
                raise TransientError("injected: Pub/Sub unavailable")
            return super().publish(topic, message)

    world = World(FinalTopicRefusesFillers())
    caplog.set_level("INFO")
    world.give_up_on(numbered(5))
    assert [m.attributes["fifo_seq"] for m in world.sink.on(DLQ)] == ["5"]  # the message is kept
    unsent = [
        r
        for r in caplog.records
        if getattr(r, "decision", {}).get("alert") == "relay_filler_unsent"
    ]
    decisions = [getattr(r, "decision") for r in unsent]  # noqa: B009 - set by the logger
    assert [(d["fifo_group"], d["fifo_seq"]) for d in decisions] == [("g", "5")]
    assert "fifo skip" in unsent[0].getMessage()
