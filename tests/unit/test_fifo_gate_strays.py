"""A copy stored at a parked number that is not the message the group's state lists there (a
*stray*: a store-loss repair's re-park whose save was refused, a crash before an unpark) never
runs in place of the listed message, and a refused repair leaves no stray behind."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate import HandlerFailedError
from pubsub_toolkit.core.fifo_policy import GateOutcome
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.support.sinks import RecordingSink
from tests.unit.test_fifo_gate import DLQ, Recorder, keyed, make_gate


class KeyRecorder(Recorder):
    """Records the dedup key that ran at each number, too."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: list[str] = []

    def __call__(self, message: Any) -> None:
        super().__call__(message)
        self.keys.append(message.attributes["dedup_key"])


def test_a_stray_stored_at_a_parked_number_does_not_run_in_place_of_the_listed_message() -> None:
    """#2 (k2) waits parked behind #1. The store loses k2's copy and holds a stray there (j,
    another message's copy nobody lists): when #1 runs and releases #2, the process's own copy
    of k2 runs - not j (before: j ran at #2 under k2's record, and k2 was lost)."""
    store, handler, sink = MemoryFifoStore(), KeyRecorder(), RecordingSink()
    gate = make_gate(handler, ManualClock(), sink, store)
    assert gate.deliver(keyed("g", 2, "k2"), "g", 2).outcome is GateOutcome.PARKED
    store.unpark("consumer-a", "g", 2)  # the store lost the copy...
    store.park("consumer-a", "g", 2, keyed("g", 2, "j"))  # ...and a stray holds the number
    assert gate.deliver(keyed("g", 1, "k1"), "g", 1).outcome is GateOutcome.PROCESSED
    assert handler.keys == ["k1", "k2"]
    assert sink.on(DLQ) == []


def test_a_repair_whose_save_is_refused_leaves_no_stray_behind() -> None:
    """This process parked #3 (y); the store lost it. Its repair parks y again - and its save
    is refused, another process having run #2 and then #3 with another message (z, a number
    the store's counter gave again) meanwhile. The repair looks again and finds #3 passed: y's
    copy must not stay stored at #3 unlisted (a stray the next user of the number meets)."""

    class WriteBeforeSave(MemoryFifoStore):
        meanwhile: Any = None

        def save(self, *args: Any) -> Any:
            step, self.meanwhile = self.meanwhile, None
            if step is not None:
                step()
            return super().save(*args)

    store, sink = WriteBeforeSave(), RecordingSink()
    gate = make_gate(Recorder(), ManualClock(), sink, store)
    other = make_gate(Recorder(), ManualClock(), sink, store)
    assert gate.deliver(keyed("g", 1, "k1"), "g", 1).outcome is GateOutcome.PROCESSED
    states, parked = dict(store._states), dict(store._parked)
    assert gate.deliver(keyed("g", 3, "y"), "g", 3).outcome is GateOutcome.PARKED
    store._states, store._parked = states, parked  # the store lost the park of #3

    def another_process() -> None:
        other.deliver(keyed("g", 2, "x"), "g", 2)
        other.deliver(keyed("g", 3, "z"), "g", 3)

    store.meanwhile = another_process
    gate.sweep("g")  # reads, finds #3 lost, repairs: the save is refused, it looks again
    assert store.load("consumer-a", "g").last_processed == 3
    assert store.parked_message("consumer-a", "g", 3) is None


def test_a_failed_runs_copy_replaces_a_stray_for_every_process_not_only_its_own() -> None:
    """A stray (j) is stored at #1 when this process runs k1 there and the handler asks to be
    retried later: the copy parked for the retry replaces the stray in the store, so another
    process - which has no copy of k1 of its own - runs k1 from the park, not j, and does not
    find #1 lost (mutation 24.2c's fix, behind SeenStore.parked's own guard)."""
    store, sink, clock = MemoryFifoStore(), RecordingSink(), ManualClock()
    this, other_handler = KeyRecorder(), KeyRecorder()
    this.failing.add(("g", 1))
    gate = make_gate(this, clock, sink, store)
    other = make_gate(other_handler, clock, sink, store)
    store.park("consumer-a", "g", 1, keyed("g", 1, "j"))  # a stray nobody lists
    with pytest.raises(HandlerFailedError):  # nacked; its copy parked for the retry
        gate.deliver(keyed("g", 1, "k1"), "g", 1)
    clock.advance(timedelta(minutes=10))
    assert other.sweep("g").outcome is GateOutcome.PROCESSED
    assert other_handler.keys == ["k1"]
