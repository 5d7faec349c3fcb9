"""A group with a copy parked is not idle: its record must not expire with the idle groups'.

The gate dates an idle group's record (nothing parked, not blocked) to expire a retention after
its last change (``fifo_rules.dated``), so groups that stop do not keep state for good. A group
waiting for a missing number with the next one parked is not idle: if its record expired, the
parked copy - acked when it was parked - would go with it, and the missing number, arriving
late, would start the group again without it. (Hand-made bug H7 of issue 24's review,
``tests/simulation/mutations.py``: the simulation's groups never wait a retention for a gap.)
"""

from __future__ import annotations

from datetime import timedelta

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.core.fifo_policy import GateOutcome, GatePolicy
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore

RETENTION = timedelta(days=8)


def test_a_copy_parked_for_longer_than_the_retention_still_runs_after_its_gap() -> None:
    clock = ManualClock()
    runs: list[int] = []
    gate = FifoGate(
        MemoryFifoStore(clock),
        consumer="c",
        handler=lambda m: runs.append(int(m.attributes["fifo_seq"])),
        policy=GatePolicy(completed_retention=RETENTION),
        clock=clock,
    )

    def message(seq: int) -> Message:
        attributes = {"fifo_group": "g", "fifo_seq": str(seq), "dedup_key": f"g#{seq}"}
        return Message(f"g:{seq}".encode(), attributes, publish_time=clock.now())

    assert gate.deliver(message(2), "g", 2).outcome is GateOutcome.PARKED
    clock.advance(RETENTION + timedelta(hours=1))  # #1 is late: the gap waits (GapPolicy.WAIT)
    gate.deliver(message(1), "g", 1)
    assert runs == [1, 2]
    assert gate.store.load("c", "g").last_processed == 2
