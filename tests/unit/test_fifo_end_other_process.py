"""Two gate processes on one group that ends (``fifo_end``): a copy one of them parked past the
end is settled by the other when it ends the group (dead-lettered ``fifo_after_end``, or dropped
as a renumbered retry). The store lost nothing, so the process that parked it must not take the
copy's unlisting for a store loss (seed 1997 of ``--enable fifo_end``: a false ALERT)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.core.fifo_policy import REASON_AFTER_END, GateOutcome, GatePolicy
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.support.sinks import RecordingSink

CONSUMER = "consumer-a"
DLQ = "projects/p/topics/dlq"


def keyed(seq: int, key: str, *, end: bool = False) -> Message:
    attributes = {"fifo_group": "g", "fifo_seq": str(seq), "dedup_key": key}
    if end:
        attributes[attr.FIFO_END] = attr.FIFO_END_TRUE
    return Message(f"{key}".encode(), attributes, message_id=f"m{seq}-{key}")


def process(store: MemoryFifoStore, clock: ManualClock, sink: RecordingSink) -> FifoGate:
    """One consumer process: its own gate (and memory of the group) on the shared store."""
    log = DecisionLog(CONSUMER)
    return FifoGate(
        store,
        consumer=CONSUMER,
        handler=lambda _message: None,
        dead_letters=DeadLetterer(sink, DLQ, log),
        policy=GatePolicy(completed_retention=timedelta(days=8)),
        clock=clock,
        log=log,
    )


@pytest.mark.parametrize(
    ("past_end", "dead_lettered"),
    [
        (keyed(3, "k2", end=True), []),  # a renumbered retry of the end: a duplicate, dropped
        (keyed(3, "k3"), [REASON_AFTER_END]),  # a message numbered past the end
    ],
)
def test_a_copy_parked_past_the_end_and_settled_by_another_process_is_no_store_loss(
    past_end: Message, dead_lettered: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    clock, sink = ManualClock(), RecordingSink()
    store = MemoryFifoStore(clock=clock)
    first, second = process(store, clock, sink), process(store, clock, sink)
    assert first.deliver(keyed(1, "k1"), "g", 1).outcome is GateOutcome.PROCESSED
    assert second.deliver(past_end, "g", 3).outcome is GateOutcome.PARKED  # early: waits for 2
    # The first process runs the end, and settles the copy parked past it.
    assert first.deliver(keyed(2, "k2", end=True), "g", 2).outcome is GateOutcome.PROCESSED
    state = store.load(CONSUMER, "g")
    assert state.complete and state.parked == ()
    assert [m.attributes[attr.ERROR_REASON] for m in sink.on(DLQ)] == dead_lettered
    # The process that parked it reads the group again: nothing was lost.
    assert second.sweep("g").outcome is GateOutcome.IDLE
    assert second.deliver(keyed(1, "k1"), "g", 1).outcome is GateOutcome.DUPLICATE
    outcomes = [getattr(r, "decision", {}).get("outcome") for r in caplog.records]
    assert "store_rollback" not in outcomes
    assert store.load(CONSUMER, "g").parked == ()  # not parked again
    assert [m.attributes[attr.ERROR_REASON] for m in sink.on(DLQ)] == dead_lettered  # once
