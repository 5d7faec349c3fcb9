"""A producer's retry far from its first copy (issue 24, defect 1): the Publisher gives a dedup
key it already numbered the same number again, so the consumer gate sees one message at one
number - never a renumbered copy beyond the gate's window of recent keys (64 numbers)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

import pytest

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.core.fifo_policy import GapPolicy, GatePolicy
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.errors import TransientError
from pubsub_toolkit.message import Message, OutboundMessage
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.producer.publisher import Publisher
from pubsub_toolkit.stores.counters.memory import MemorySequenceCounter
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.support.sinks import RecordingSink

ORIGIN = "projects/p/topics/origin"
DLQ = "projects/p/topics/dlq"


class FailingAt(RecordingSink):
    """A sink whose ``fail_at``-th publish (1-based) fails once, after nothing was sent."""

    def __init__(self, fail_at: int) -> None:
        super().__init__()
        self.fail_at, self.calls = fail_at, 0

    def publish(self, topic: str, message: OutboundMessage) -> str:
        self.calls += 1
        if self.calls == self.fail_at:
            raise TransientError("injected publish failure")
        return super().publish(topic, message)


class Pipeline:
    """One Publisher and one consumer gate (gap policy skip, so a gap cannot hide a rerun)."""

    def __init__(self, sink: RecordingSink | None = None) -> None:
        self.sink = sink or RecordingSink()
        self.publisher = Publisher(self.sink, ORIGIN, counter=MemorySequenceCounter())
        self.dead_letters = RecordingSink()
        self.handled: list[str] = []
        self.clock = ManualClock()
        log = DecisionLog("consumer-a")
        self.gate = FifoGate(
            MemoryFifoStore(),
            consumer="consumer-a",
            handler=lambda m: self.handled.append(m.attributes["dedup_key"]),
            dead_letters=DeadLetterer(self.dead_letters, DLQ, log),
            policy=GatePolicy(gap=GapPolicy.SKIP, gap_timeout=timedelta(seconds=1)),
            clock=self.clock,
            log=log,
        )

    def consume(self) -> None:
        """Every published message once, in publish order, then the sweeper past any gap."""
        for i, out in enumerate(self.sink.on(ORIGIN)):
            message = Message(out.data, dict(out.attributes), message_id=f"m{i}")
            self.gate.deliver(message, "g", int(out.attributes["fifo_seq"]))
        for _ in range(3):
            self.clock.advance(timedelta(seconds=2))
            self.gate.sweep("g")

    def dead_lettered(self) -> list[str]:
        return [m.attributes["dedup_key"] for m in self.dead_letters.on(DLQ)]


def items(keys: list[str]) -> list[tuple[bytes, Mapping[str, str]]]:
    return [(k.encode(), {"dedup_key": k}) for k in keys]


def test_a_retry_70_numbers_after_its_first_copy_does_not_run_again() -> None:
    pipeline = Pipeline()
    pipeline.publisher.publish(b"A", fifo_group="g", dedup_key="order-A")
    pipeline.publisher.publish_batch("g", items([f"other-{i}" for i in range(70)]))
    pipeline.publisher.publish(b"A", fifo_group="g", dedup_key="order-A")  # the retry
    pipeline.consume()
    assert pipeline.handled.count("order-A") == 1
    assert len(pipeline.handled) == 71
    assert pipeline.dead_lettered() == []


def test_a_retried_batch_that_failed_at_item_80_runs_each_item_once_in_order() -> None:
    keys = [f"item-{i}" for i in range(1, 101)]
    pipeline = Pipeline(FailingAt(80))
    with pytest.raises(TransientError):
        pipeline.publisher.publish_batch("g", items(keys))
    pipeline.publisher.publish_batch("g", items(keys))  # the producer's retry
    pipeline.consume()
    assert pipeline.handled == keys
    assert pipeline.dead_lettered() == []


def test_a_retry_of_a_message_that_ran_long_before_the_groups_end_is_no_dead_letter() -> None:
    """It ran: renumbered past the end, it was dead-lettered fifo_after_end - both."""
    pipeline = Pipeline()
    pipeline.publisher.publish(b"A", fifo_group="g", dedup_key="order-A")
    others = items([f"other-{i}" for i in range(70)])
    pipeline.publisher.publish_batch("g", others, end_of_group=True)
    pipeline.publisher.publish(b"A", fifo_group="g", dedup_key="order-A")  # the retry
    pipeline.consume()
    assert pipeline.handled.count("order-A") == 1
    assert pipeline.dead_lettered() == []


def test_a_key_reused_for_other_content_is_a_new_message_at_a_new_number() -> None:
    """Only a retry - same key, same content - keeps its number: a key reused for another
    message gets its own (the consumer side dead-letters the mismatch, as before)."""
    sink = RecordingSink()
    publisher = Publisher(sink, ORIGIN, counter=MemorySequenceCounter())
    for data in (b"A", b"A", b"B"):
        publisher.publish(data, fifo_group="g", dedup_key="order-A")
    assert [m.attributes["fifo_seq"] for m in sink.on(ORIGIN)] == ["1", "1", "2"]
