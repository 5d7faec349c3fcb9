"""``MessageProcessor.process_batch`` with a store that fails part-way through a batch: once a
delivery of the batch is settled (run, dead-lettered), a store failure must be answered per
delivery - it never raises out of ``process_batch``, which would nack the settled ones too."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.consumer.processor import MessageProcessor
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor
from pubsub_toolkit.errors import StoreUnavailableError
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from pubsub_toolkit.stores.fifo_state.base import GroupState
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore


def _message(seq: int) -> Message:
    attributes = {"fifo_group": "g", "fifo_seq": str(seq), "dedup_key": f"k{seq}"}
    return Message(f"{seq}".encode(), attributes, message_id=f"m{seq}")


class GoesDownAfterAdvance(MemoryFifoStore):
    """A store that becomes unreachable once a write has advanced the group to ``past``."""

    def __init__(self, clock: ManualClock, past: int) -> None:
        super().__init__(clock=clock)
        self.past = past
        self.down = False

    def load(self, consumer: str, group: str) -> GroupState:
        self._check()
        return super().load(consumer, group)

    def save(
        self, consumer: str, group: str, state: GroupState, expected: GroupState
    ) -> GroupState | None:
        self._check()
        saved = super().save(consumer, group, state, expected)
        if saved is not None and state.last_processed >= self.past:
            self.down = True  # the outage starts right after this write landed
        return saved

    def _check(self) -> None:
        if self.down:
            raise StoreUnavailableError("fifo: the store is unreachable (outage)")


def _processor(store: MemoryFifoStore, clock: ManualClock, handler: Any) -> MessageProcessor:
    gate = FifoGate(store, consumer="c", handler=handler, clock=clock, batch=10)
    dedup = IdempotentProcessor(
        MemoryDedupStore(clock),
        namespace="c",
        lease=timedelta(seconds=30),
        ttl=timedelta(hours=1),
        clock=clock,
    )
    return MessageProcessor(handler=handler, dedup=dedup, gate=gate, clock=clock)


def test_a_store_outage_after_a_batch_ran_is_answered_per_delivery_not_raised() -> None:
    clock = ManualClock()
    ran: list[list[int]] = []
    store = GoesDownAfterAdvance(clock, past=3)
    processor = _processor(store, clock, lambda ms: ran.append([int(m.data) for m in ms]))
    # 1-3 run as one batch and the advance past them lands; then the store goes away.
    batch = [_message(1), _message(2), _message(3), _message(5), _message(6)]
    results = processor.process_batch(batch)
    assert len(results) == 5  # one answer per delivery: process_batch did not raise
    assert ran == [[1, 2, 3]]
    assert results[:3] == ["processed", "processed", "processed"]  # acked: they ran
    assert all(isinstance(r, StoreUnavailableError) for r in results[3:]), results  # nacked
    store.down = False
    store.past = 10**9
    # The two nacked ones come again once it is back: they wait parked for 4.
    assert processor.process_batch(batch[3:]) == ["parked", "parked"]
    assert processor.process(_message(4)) == "processed"
    assert ran == [[1, 2, 3], [4], [5, 6]]  # each once, in order
