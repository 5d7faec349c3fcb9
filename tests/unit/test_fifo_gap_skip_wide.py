"""The gap policy ``skip`` over a gap of any width: the missing numbers are one range.

A producer numbering by hand may send ``fifo_seq`` 1 and then ``9007199254740991`` (2**53 - 1,
the contract's largest number). Skipping that gap once listed every missing number
(``tuple(range(head, first_parked))``): the sweep raised ``MemoryError`` on every pass, the
group never moved, and a gap of some millions would have taken the consumer's memory instead.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from pubsub_toolkit.attributes import MAX_FIFO_SEQ
from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.core.fifo_policy import GapPolicy, GateOutcome, GatePolicy
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.support.sinks import RecordingSink

DLQ = "projects/p/topics/dlq"


def _msg(seq: int) -> Message:
    return Message(f"g:{seq}".encode(), {"fifo_group": "g", "fifo_seq": str(seq)})


@pytest.mark.parametrize("far", [MAX_FIFO_SEQ, 10**12])
def test_skip_passes_over_a_gap_up_to_the_largest_number_as_one_range(
    far: int, caplog: pytest.LogCaptureFixture
) -> None:
    clock, sink, store, seen = ManualClock(), RecordingSink(), MemoryFifoStore(), []
    log = DecisionLog("consumer-a")
    gate = FifoGate(
        store,
        consumer="consumer-a",
        handler=lambda m: seen.append(int(m.attributes["fifo_seq"])),
        dead_letters=DeadLetterer(sink, DLQ, log),
        policy=GatePolicy(gap=GapPolicy.SKIP, gap_timeout=timedelta(minutes=1)),
        clock=clock,
        log=log,
    )
    assert gate.deliver(_msg(1), "g", 1).outcome is GateOutcome.PROCESSED
    assert gate.deliver(_msg(far), "g", far).outcome is GateOutcome.PARKED
    clock.advance(timedelta(minutes=2))
    with caplog.at_level(logging.INFO):
        assert gate.sweep("g").outcome is GateOutcome.PROCESSED
    assert seen == [1, far]
    state = store.load("consumer-a", "g")
    assert (state.last_processed, state.skipped) == (far, ((2, far - 1),))
    # The decision names the range, not every number in it.
    [skipped] = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(skipped) < 200 and f"2-{far - 1}" in skipped
    # A skipped number that turns up after all is kept, with the reason.
    assert gate.deliver(_msg(far - 1), "g", far - 1).outcome is GateOutcome.DEAD_LETTERED
    assert [m.attributes["error_reason"] for m in sink.on(DLQ)] == ["fifo_late_after_skip"]
