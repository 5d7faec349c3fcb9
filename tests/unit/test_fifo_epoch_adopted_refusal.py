"""A number refused in the epoch a record without one adopts stays taken after a store loss.

The store lost a group's record (and its counter: a new epoch began). A message without an
epoch - another producer's, not the Publisher's - ran at #1 on the empty record. The new
sequence's own #1 then met that record: the record adopts its epoch, and #1 is another key's,
so it is dead-lettered ``fifo_sequence_reused`` (the reused number's victim). A process that
saw the group before the loss then reads the record: if the adoption was never written, it
takes the record without an epoch for the loss itself and writes back what it saw - the run
at #1 is gone, the new epoch's sequence starts again from 0, and #1 - refused to the
legitimate message for being taken - runs again, with yet another message, on the process
that ran the first one (simulation seed 230393). Written before the refusal, the adoption
makes the record the new epoch's: the repair keeps its runs and the group goes on from #1.
"""

from __future__ import annotations

from typing import Any

from pubsub_toolkit.clock import ManualClock
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


def test_a_number_refused_as_reused_in_an_adopted_epoch_never_runs_another_message() -> None:
    store, clock, sink = MemoryFifoStore(), ManualClock(), RecordingSink()
    saw_keys = KeyRecorder()
    saw = make_gate(saw_keys, clock, sink, store)  # saw the group before the loss
    fresh_keys = KeyRecorder()
    fresh = make_gate(fresh_keys, clock, sink, store)  # met the group after it

    for seq, key in ((1, "a"), (2, "b")):
        message = keyed("g", seq, key, fifo_epoch="2")
        assert saw.deliver(message, "g", seq).outcome is GateOutcome.PROCESSED
    store._states.clear()  # the store lost the group (and its counter: epoch 3 begins)
    store._parked.clear()

    # Another producer's message (no epoch) runs at #1 on the empty record...
    assert fresh.deliver(keyed("g", 1, "h1"), "g", 1).outcome is GateOutcome.PROCESSED
    # ...so epoch 3's #1 finds its number taken: the victim, dead-lettered.
    victim = keyed("g", 1, "k1", fifo_epoch="3")
    assert fresh.deliver(victim, "g", 1).outcome is GateOutcome.DEAD_LETTERED

    # The process that saw epoch 2 repairs the record - keeping the run at #1 - and #2 runs.
    two = keyed("g", 2, "k2", fifo_epoch="3")
    assert saw.deliver(two, "g", 2).outcome is GateOutcome.PROCESSED
    assert saw_keys.keys == ["a", "b", "k2"]

    # #1 stays taken: another message there is dead-lettered, never run (before: it ran).
    other = keyed("g", 1, "h2")
    assert fresh.deliver(other, "g", 1).outcome is GateOutcome.DEAD_LETTERED
    assert fresh_keys.keys == ["h1"]
    refused = [m.attributes["dedup_key"] for m in sink.on(DLQ)]
    assert refused == ["k1", "h2"]
    assert store.load("consumer-a", "g").epoch == 3
