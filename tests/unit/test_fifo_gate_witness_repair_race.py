"""The FIFO gate's witness (``SeenStore``) when a sibling thread REPAIRS the group while this
thread's read is under way (simulation seed 55719, issue 24): the read returns the sibling's
repaired state, which no longer lists the parked numbers the repair could not restore. Compared
with what this thread had seen before the read, that looks like a second loss - and a second
repair, on that stale memory, would fence this process's own live run (whose lease the first
repair had just moved to a new token): its advance refused, the number free to run again."""

from __future__ import annotations

from typing import Any

import pytest

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.core.fifo_policy import GateOutcome
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.support.sinks import RecordingSink
from tests.unit.test_fifo_gate import Recorder, keyed, make_gate


class SiblingDuringTheRead(MemoryFifoStore):
    """Runs ``meanwhile`` (once) when a load starts, before it reads the record."""

    meanwhile: Any = None

    def load(self, *args: Any) -> Any:
        step, self.meanwhile = self.meanwhile, None
        if step is not None:
            step()
        return super().load(*args)


def test_a_siblings_repair_during_the_read_does_not_fence_the_runs_own_lease(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, sink, store = ManualClock(), RecordingSink(), SiblingDuringTheRead()
    before = dict(store._states), dict(store._parked)
    other = make_gate(Recorder(), clock, sink, store)  # another process: it parks #2
    assert other.deliver(keyed("g", 2, "k2"), "g", 2).outcome is GateOutcome.PARKED

    class LosesTheStoreMidRun(Recorder):
        def __call__(self, message: Message) -> None:
            super().__call__(message)
            # While #1 runs here the store loses every write (the park of #2, this run's
            # lease), and the process's sweeper repairs the group while the advance re-reads it.
            store._states, store._parked = dict(before[0]), dict(before[1])
            store.meanwhile = lambda: gate.sweep("g")

    handler = LosesTheStoreMidRun()
    gate = make_gate(handler, clock, sink, store)
    result = gate.deliver(keyed("g", 1, "k1"), "g", 1)
    outcomes = [getattr(r, "decision", {}).get("outcome") for r in caplog.records]
    assert handler.seen["g"] == [1]
    assert "lease_outlived" not in outcomes  # its own lease was moved, not taken over
    assert outcomes.count("store_rollback") == 1  # one loss, one repair
    assert result.outcome is GateOutcome.PROCESSED
    assert store.load("consumer-a", "g").last_processed == 1  # the advance is recorded
