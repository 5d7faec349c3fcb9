"""The FIFO gate's store calls per delivery, pinned (issue 26): the sans-I/O core must ask its
store exactly what the gate before it (602d3ba) asked - no extra load, no extra parked read.

The figures were counted with bench/counting.py on 602d3ba and on the core for the same
workload: each group's numbers delivered in a locally shuffled order (early arrivals parked,
their successors run from the park), with sweeps between deliveries; both gave these counts.
"""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from bench.counting import CountingFifoStore
from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.core.fifo_policy import GatePolicy
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore

GROUPS = 16
PER_GROUP = 40


def message(group: str, seq: int) -> Message:
    attributes = {"fifo_group": group, "fifo_seq": str(seq), "dedup_key": f"{group}-k{seq}"}
    return Message(f"{group}:{seq}".encode(), attributes, message_id=f"{group}-m{seq}")


def shuffled_calls(*, hold: bool) -> dict[str, int]:
    """Deliver GROUPS x PER_GROUP messages, each moved up to 1.5 places, sweeping every 200."""
    rnd = random.Random(7)
    clock = ManualClock()
    store = CountingFifoStore(MemoryFifoStore(clock=clock))
    policy = GatePolicy(lease_hold=timedelta(seconds=2)) if hold else GatePolicy()
    gate = FifoGate(
        store,  # type: ignore[arg-type]  # a FifoStore by shape
        consumer="c",
        handler=lambda m: None,
        policy=policy,
        clock=clock,
        log=DecisionLog("c"),
    )
    items = [(f"g{g}", s) for s in range(1, PER_GROUP + 1) for g in range(GROUPS)]
    order = sorted(items, key=lambda item: item[1] + rnd.random() * 1.5)
    for n, (group, seq) in enumerate(order):
        clock.advance(timedelta(milliseconds=1))
        gate.deliver(message(group, seq), group, seq)
        if n % 200 == 0:
            for listed in gate.groups():
                gate.sweep(listed)
    for listed in gate.groups():
        gate.sweep(listed)
    return dict(store.calls)


@pytest.mark.parametrize(
    ("hold", "expected"),
    [
        # 640 messages: about one load each; per early arrival a park, a parked read after it
        # and one to run it, an unpark (602d3ba's counts, call for call).
        (
            False,
            {
                "groups": 5,
                "load": 641,
                "park": 35,
                "parked_message": 70,
                "save": 1280,
                "unpark": 35,
            },
        ),
        (
            True,
            {"groups": 5, "load": 643, "park": 35, "parked_message": 70, "save": 693, "unpark": 35},
        ),
    ],
)
def test_shuffled_deliveries_ask_the_store_what_the_old_gate_asked(
    hold: bool, expected: dict[str, int]
) -> None:
    assert shuffled_calls(hold=hold) == expected
