"""A copy left stored at a number of a group's earlier sequence (a stray: its process crashed
between parking it and writing the state that lists it, and the message then ran from its own
delivery, which unparks nothing unlisted) does not hold that number in the new sequence: once
the group's counter started again, the new message given the number parks and runs (simulation
seed 223215: new #2 was dead-lettered ``fifo_sequence_reused`` against the old #2's stray, and
the group stopped at 1)."""

from __future__ import annotations

import pytest

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.core.fifo_policy import GateOutcome
from pubsub_toolkit.errors import TransientError
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.support.sinks import RecordingSink
from tests.unit.test_fifo_gate import DLQ, keyed, make_gate
from tests.unit.test_fifo_gate_strays import KeyRecorder

OLD, NEW = "1796494651800794", "1796494651823655"  # the counter's epochs, before and after


def test_a_stray_of_the_old_sequence_does_not_take_the_new_sequences_number() -> None:
    store, handler, sink = MemoryFifoStore(), KeyRecorder(), RecordingSink()
    gate = make_gate(handler, ManualClock(), sink, store)
    assert gate.deliver(keyed("g", 1, "a", fifo_epoch=OLD), "g", 1).outcome is (
        GateOutcome.PROCESSED
    )
    old_2 = keyed("g", 2, "b", fifo_epoch=OLD)
    store.park("consumer-a", "g", 2, old_2)  # parked, then its process crashed: unlisted
    assert gate.deliver(old_2, "g", 2).outcome is GateOutcome.PROCESSED  # from its delivery
    # The counter started again: new #2 arrives before new #1 (early: parked). It replaced the
    # old #2's copy, whose run may still unpark it: delivered again to keep the copy
    # (test_fifo_epoch_late_unpark.py).
    new_2 = keyed("g", 2, "y", fifo_epoch=NEW)
    with pytest.raises(TransientError):
        gate.deliver(new_2, "g", 2)
    assert gate.deliver(new_2, "g", 2).outcome is GateOutcome.PARKED
    assert gate.deliver(keyed("g", 1, "x", fifo_epoch=NEW), "g", 1).outcome is (
        GateOutcome.PROCESSED
    )
    assert handler.keys == ["a", "b", "x", "y"]
    assert sink.on(DLQ) == []
    assert store.load("consumer-a", "g").last_processed == 2
    assert store.parked_message("consumer-a", "g", 2) is None


def test_a_copy_of_the_same_sequence_at_the_number_still_holds_it() -> None:
    """The stray rule is about earlier sequences only: within one sequence, the copy stored
    first at a number holds it, and another message there is a reused number."""
    store, handler, sink = MemoryFifoStore(), KeyRecorder(), RecordingSink()
    gate = make_gate(handler, ManualClock(), sink, store)
    assert gate.deliver(keyed("g", 2, "b", fifo_epoch=NEW), "g", 2).outcome is GateOutcome.PARKED
    other = keyed("g", 2, "z", fifo_epoch=NEW)
    assert gate.deliver(other, "g", 2).outcome is GateOutcome.DEAD_LETTERED
    assert [m.attributes["error_reason"] for m in sink.on(DLQ)] == ["fifo_sequence_reused"]
