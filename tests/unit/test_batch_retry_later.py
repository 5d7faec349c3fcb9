"""A batch handler that raises RetryLater (``FifoGate(batch=N)`` through the processor): the
batch's head must wait the asked delay, as one by one, not run again at once."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.consumer.processor import MessageProcessor
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor
from pubsub_toolkit.errors import RetryLater
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore


def _message(seq: int) -> Message:
    attributes = {"fifo_group": "g", "fifo_seq": str(seq), "dedup_key": f"k{seq}"}
    return Message(f"{seq}".encode(), attributes, message_id=f"m{seq}")


@pytest.mark.parametrize("hold", [None, timedelta(seconds=2)])  # the streaming Consumer holds
def test_a_batch_asking_to_retry_later_is_not_run_again_at_once(hold: timedelta | None) -> None:
    clock = ManualClock()
    calls: list[tuple[list[int], object]] = []

    def handler(messages: list[Message]) -> None:
        calls.append(([int(m.data) for m in messages], clock.now()))
        if len(calls) == 1:
            raise RetryLater(timedelta(minutes=10), "the downstream is not ready")

    store = MemoryFifoStore(clock=clock)
    gate = FifoGate(store, consumer="c", handler=handler, clock=clock, batch=10)
    if hold is not None:
        gate.use_lease_hold(hold)
    dedup = IdempotentProcessor(
        MemoryDedupStore(clock),
        namespace="c",
        lease=timedelta(seconds=30),
        ttl=timedelta(hours=1),
        clock=clock,
    )
    processor = MessageProcessor(handler=handler, dedup=dedup, gate=gate, clock=clock)
    results = processor.process_batch([_message(1), _message(2), _message(3)])
    assert not any(isinstance(r, Exception) for r in results), results  # acked: parked
    assert [numbers for numbers, _ in calls] == [[1, 2, 3]]  # not run again at once
    clock.advance(timedelta(minutes=11))
    gate.sweep("g")
    later = [n for numbers, _ in calls[1:] for n in numbers]
    assert later == [1, 2, 3]  # after the delay: the head, then the parked rest, in order
    assert calls[1][1] >= calls[0][1] + timedelta(minutes=10)
    assert store.load("c", "g").last_processed == 3
