"""The consumer checks the contract's key and group attributes before it acts on them - also on
a message that never passed ingress (a user's own topic): a blank ``dedup_key`` or
``fifo_group``, or a ``fifo_seq`` / ``fifo_end`` without a group, is dead-lettered with the
same reason ingress gives, never run unordered or under a key that is no key."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.consumer.processor import MessageProcessor
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.support.sinks import RecordingSink

DLQ = "projects/p/topics/dlq"


def processor(sink: RecordingSink, ran: list[Message]) -> MessageProcessor:
    log = DecisionLog("c")
    return MessageProcessor(
        handler=ran.append,
        dedup=IdempotentProcessor(
            MemoryDedupStore(), namespace="c", lease=timedelta(seconds=30), ttl=timedelta(days=1)
        ),
        gate=FifoGate(MemoryFifoStore(), consumer="c", handler=ran.append),
        dead_letters=DeadLetterer(sink, DLQ, log),
    )


@pytest.mark.parametrize(
    ("attributes", "reason"),
    [
        ({"dedup_key": ""}, attr.REASON_INVALID_DEDUP_KEY),
        ({"dedup_key": "   "}, attr.REASON_INVALID_DEDUP_KEY),
        ({"dedup_key": "k", "fifo_group": " ", "fifo_seq": "1"}, attr.REASON_INVALID_FIFO_GROUP),
        ({"dedup_key": "k", "fifo_seq": "1"}, attr.REASON_SEQ_WITHOUT_GROUP),
        ({"dedup_key": "k", "fifo_end": "true"}, attr.REASON_END_WITHOUT_GROUP),
        ({"dedup_key": "k", "fifo_end": "false"}, attr.REASON_INVALID_FIFO_END),
    ],
)
def test_a_broken_key_or_group_is_dead_lettered_with_its_reason(
    attributes: dict[str, str], reason: str
) -> None:
    sink, ran = RecordingSink(), []
    consumer = processor(sink, ran)
    assert consumer.process(Message(b"x", attributes, message_id="m1")) == "dead_lettered"
    assert ran == []
    assert [m.attributes["error_reason"] for m in sink.on(DLQ)] == [reason]


def test_the_same_message_with_its_attributes_right_runs() -> None:
    sink, ran = RecordingSink(), []
    consumer = processor(sink, ran)
    message = Message(b"x", {"dedup_key": "k", "fifo_group": "g", "fifo_seq": "1"}, "m1")
    assert consumer.process(message) == "processed"
    assert [m.data for m in ran] == [b"x"] and sink.on(DLQ) == []


@pytest.mark.parametrize("broken", [{"dedup_key": "  "}, {"fifo_end": "yes"}])
def test_a_broken_message_at_a_valid_number_leaves_its_place_and_the_group_goes_on(
    broken: dict[str, str],
) -> None:
    """As ingress does: dead-lettered, and the gate told that the number carries nothing - the
    group does not wait at it for a message that will never come (nor for an operator)."""
    sink, ran = RecordingSink(), []
    consumer = processor(sink, ran)

    def numbered(seq: int, **extra: str) -> Message:
        attributes = {"dedup_key": f"k{seq}", "fifo_group": "g", "fifo_seq": str(seq), **extra}
        return Message(f"#{seq}".encode(), attributes, message_id=f"m{seq}")

    assert consumer.process(numbered(1)) == "processed"
    assert consumer.process(numbered(2, **broken)) == "dead_lettered"
    assert consumer.process(numbered(2, **broken)) == "dead_lettered"  # a redelivery
    assert consumer.process(numbered(3)) == "processed"  # not parked behind #2
    assert [m.data for m in ran] == [b"#1", b"#3"]
    assert {m.attributes["dedup_key"] for m in sink.on(DLQ)} == {broken.get("dedup_key", "k2")}
