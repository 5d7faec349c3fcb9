"""A ``fifo_group`` without a ``fifo_seq`` (a plain client that named a group and no number) is
dead-lettered ``fifo_group_without_seq`` - at ingress and at the consumer alike - instead of
running unordered: ordering was asked for and cannot be given, so it is never dropped silently.
(Ingress cannot number it: push delivery reaches it in no particular order.)"""

from __future__ import annotations

from datetime import timedelta

import pytest

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.consumer.processor import MessageProcessor
from pubsub_toolkit.core.ingress import IngressOutcome
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor
from pubsub_toolkit.envelope import check_publishable
from pubsub_toolkit.errors import ContractViolation, TransientError
from pubsub_toolkit.ingress.pipeline import Ingress
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.support.sinks import RecordingSink

FINAL, DLQ = "projects/p/topics/final", "projects/p/topics/dlq"
GROUPED = [
    {attr.FIFO_GROUP: "order-42"},
    {attr.FIFO_GROUP: "order-42", attr.DEDUP_KEY: "evt-1"},
    {attr.FIFO_GROUP: "order-42", attr.FIFO_END: "true"},
]


def ingress(sink: RecordingSink) -> Ingress:
    clock = ManualClock()
    return Ingress(
        store=MemoryDedupStore(clock),
        sink=sink,
        final_topic=FINAL,
        dead_letter_topic=DLQ,
        lease=timedelta(seconds=30),
        ttl=timedelta(days=8),
        clock=clock,
    )


def consumer(sink: RecordingSink, ran: list[Message]) -> MessageProcessor:
    return MessageProcessor(
        handler=ran.append,
        dedup=IdempotentProcessor(
            MemoryDedupStore(), namespace="c", lease=timedelta(seconds=30), ttl=timedelta(days=1)
        ),
        gate=FifoGate(MemoryFifoStore(), consumer="c", handler=ran.append),
        dead_letters=DeadLetterer(sink, DLQ, DecisionLog("c")),
    )


@pytest.mark.parametrize("attributes", GROUPED)
def test_ingress_dead_letters_a_group_without_a_number(attributes: dict[str, str]) -> None:
    sink = RecordingSink()
    result = ingress(sink).handle(Message(b"order created", attributes, message_id="m1"))
    assert result.outcome is IngressOutcome.DEAD_LETTERED
    assert sink.on(FINAL) == []
    [dead] = sink.on(DLQ)
    assert dead.attributes[attr.ERROR_REASON] == attr.REASON_GROUP_WITHOUT_SEQ
    assert "fifo_seq" in dead.attributes[attr.ERROR_DETAIL]
    assert dead.data == b"order created"  # the message whole, for a replay once numbered


def test_ingress_still_forwards_a_numbered_message_of_the_group() -> None:
    sink = RecordingSink()
    message = Message(b"x", {attr.FIFO_GROUP: "order-42", attr.FIFO_SEQ: "1"}, message_id="m1")
    assert ingress(sink).handle(message).outcome is IngressOutcome.PUBLISHED
    assert sink.on(DLQ) == [] and len(sink.on(FINAL)) == 1


@pytest.mark.parametrize("attributes", GROUPED)
def test_the_consumer_dead_letters_a_group_without_a_number(attributes: dict[str, str]) -> None:
    """A message that never passed ingress (a plain client publishing to the consumer's topic)
    gets the same reason, and the handler never runs it unordered."""
    sink, ran = RecordingSink(), list[Message]()
    processor = consumer(sink, ran)
    assert processor.process(Message(b"x", attributes, message_id="m1")) == "dead_lettered"
    assert ran == []
    assert [m.attributes[attr.ERROR_REASON] for m in sink.on(DLQ)] == [
        attr.REASON_GROUP_WITHOUT_SEQ
    ]


def test_the_consumer_never_acks_it_unhandled_when_the_dead_letter_fails() -> None:
    sink, ran = RecordingSink(), list[Message]()
    processor = consumer(sink, ran)
    sink.fail_next = 1
    message = Message(b"x", {attr.FIFO_GROUP: "order-42"}, message_id="m1")
    with pytest.raises(TransientError):  # nacked: delivered again, not lost
        processor.process(message)
    assert ran == [] and sink.on(DLQ) == []
    assert processor.process(message) == "dead_lettered"
    assert ran == []


def test_a_rebuilt_message_is_held_to_the_same_rule() -> None:
    with pytest.raises(ContractViolation) as info:
        check_publishable(b"x", {attr.FIFO_GROUP: "order-42"})
    assert info.value.reason == attr.REASON_GROUP_WITHOUT_SEQ
