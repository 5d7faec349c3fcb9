"""Batched FIFO handlers (``FifoGate(batch=N)``): consecutive messages of a group go to the
handler as one list and the group advances once per list - and a failed batch runs again one
message at a time, so a poison message is found alone and its neighbours are not blamed."""

from __future__ import annotations

from datetime import timedelta

import pytest

from bench.counting import CountingFifoStore
from pubsub_toolkit import attributes as attr
from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.consumer.processor import MessageProcessor
from pubsub_toolkit.core.fifo_policy import REASON_POISON, GateOutcome, GatePolicy
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.support.sinks import RecordingSink

CONSUMER = "consumer-a"
DLQ = "projects/p/topics/dlq"


def message(seq: int, group: str = "g") -> Message:
    attributes = {"fifo_group": group, "fifo_seq": str(seq), "dedup_key": f"{group}-k{seq}"}
    return Message(f"{seq}".encode(), attributes, message_id=f"{group}-m{seq}")


class BatchRecorder:
    """A batch handler: records each call's numbers; ``poison`` numbers always fail."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []
        self.poison: set[int] = set()

    def __call__(self, messages: list[Message]) -> None:
        numbers = [int(m.data) for m in messages]
        if self.poison & set(numbers):
            raise RuntimeError(f"cannot handle {sorted(self.poison & set(numbers))}")
        self.calls.append(numbers)

    @property
    def ran(self) -> list[int]:
        return [n for call in self.calls for n in call]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def store(clock: ManualClock) -> CountingFifoStore:
    return CountingFifoStore(MemoryFifoStore(clock=clock))


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


def make_gate(
    store: CountingFifoStore,
    clock: ManualClock,
    sink: RecordingSink,
    handler: BatchRecorder,
    *,
    batch: int = 10,
    **policy: object,
) -> FifoGate:
    log = DecisionLog(CONSUMER)
    return FifoGate(
        store,  # type: ignore[arg-type]  # a FifoStore by shape
        consumer=CONSUMER,
        handler=handler,  # type: ignore[arg-type]  # batch mode: the handler takes a list
        dead_letters=DeadLetterer(sink, DLQ, log),
        policy=GatePolicy(retry_backoff=timedelta(seconds=1), **policy),  # type: ignore[arg-type]
        clock=clock,
        log=log,
        batch=batch,
    )


def deliveries(*numbers: int) -> list[tuple[Message, int]]:
    return [(message(n), n) for n in numbers]


def test_consecutive_deliveries_run_as_one_batch_with_one_advance(
    store: CountingFifoStore, clock: ManualClock, sink: RecordingSink
) -> None:
    handler = BatchRecorder()
    gate = make_gate(store, clock, sink, handler, batch=4)
    results = gate.deliver_batch("g", deliveries(3, 1, 2, 4, 5, 7))  # in any order
    outcomes = [r.outcome for r in results if not isinstance(r, Exception)]
    assert outcomes == [GateOutcome.PROCESSED] * 4 + [GateOutcome.PROCESSED, GateOutcome.PARKED]
    # #1-#4 as one batch (the limit), #5 alone, #7 early (parked): two lease+advance pairs.
    assert handler.calls == [[1, 2, 3, 4], [5]]
    assert store.calls["save"] == 2 + 2 + 1  # two runs, and #7's park listed in the state
    assert store.load(CONSUMER, "g").last_processed == 5


def test_parked_successors_run_in_batches(
    store: CountingFifoStore, clock: ManualClock, sink: RecordingSink
) -> None:
    handler = BatchRecorder()
    gate = make_gate(store, clock, sink, handler, batch=3)
    for n in range(2, 9):
        assert gate.deliver(message(n), "g", n).outcome is GateOutcome.PARKED
    store.reset()
    assert gate.deliver(message(1), "g", 1).outcome is GateOutcome.PROCESSED
    assert handler.calls == [[1], [2, 3, 4], [5, 6, 7], [8]]
    # One lease, one advance per batch (4), one unpark per parked number (7).
    assert store.calls["save"] == 1 + 4
    assert store.calls["unpark"] == 7


def test_a_failed_batch_runs_one_at_a_time_and_only_the_poison_is_dead_lettered(
    store: CountingFifoStore, clock: ManualClock, sink: RecordingSink
) -> None:
    handler = BatchRecorder()
    handler.poison = {2}
    gate = make_gate(store, clock, sink, handler, batch=10, max_attempts=2)
    results = gate.deliver_batch("g", deliveries(1, 2, 3))
    assert handler.calls == [[1]]  # the batch failed; #1 alone ran, #2 alone failed
    assert [type(r).__name__ for r in results] == [
        "GateResult",
        "GateResult",  # #2: its copy parked for the retry (acked)
        "GateResult",  # #3: parked behind it
    ]
    for _ in range(3):
        clock.advance(timedelta(seconds=5))
        gate.sweep("g")
    assert handler.ran == [1, 3]  # #3 was not blamed for its neighbour
    assert [m.attributes["error_reason"] for m in sink.on(DLQ)] == [REASON_POISON]
    assert sink.on(DLQ)[0].attributes["fifo_seq"] == "2"


def test_a_filler_ends_a_batch_and_is_passed_over_without_the_handler(
    store: CountingFifoStore, clock: ManualClock, sink: RecordingSink
) -> None:
    handler = BatchRecorder()
    gate = make_gate(store, clock, sink, handler)
    filler = Message(b"", dict(attr.filler_message("g", 3, "g-k3", "cancelled").attributes))
    batch = [*deliveries(1, 2), (filler, 3), *deliveries(4, 5)]
    results = gate.deliver_batch("g", batch)
    assert [r.outcome for r in results if not isinstance(r, Exception)] == [
        GateOutcome.PROCESSED,
        GateOutcome.PROCESSED,
        GateOutcome.FILLED,
        GateOutcome.PROCESSED,
        GateOutcome.PROCESSED,
    ]
    assert handler.calls == [[1, 2], [4, 5]]


def test_the_processor_hands_a_message_outside_groups_over_as_a_list_of_one(
    clock: ManualClock, sink: RecordingSink
) -> None:
    handler = BatchRecorder()
    gate = make_gate(CountingFifoStore(MemoryFifoStore(clock=clock)), clock, sink, handler)
    dedup = IdempotentProcessor(
        MemoryDedupStore(clock=clock),
        namespace=CONSUMER,
        lease=timedelta(seconds=30),
        ttl=timedelta(days=1),
        clock=clock,
    )
    processor = MessageProcessor(handler=handler, dedup=dedup, gate=gate)  # type: ignore[arg-type]
    plain = Message(b"9", {"dedup_key": "plain"}, message_id="p1")
    assert processor.process_batch([plain]) == ["processed"]
    assert processor.process_batch([message(1), message(2)]) == ["processed", "processed"]
    assert handler.calls == [[9], [1, 2]]


def test_batch_must_be_a_positive_integer(
    store: CountingFifoStore, clock: ManualClock, sink: RecordingSink
) -> None:
    with pytest.raises(ValueError, match="batch must be an integer >= 1"):
        make_gate(store, clock, sink, BatchRecorder(), batch=0)
