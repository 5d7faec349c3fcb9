"""The FIFO gate's witness (``SeenStore``) against threads of its own process: a sibling's write
is no store loss. Sync gate only - the scenario calls the gate again from inside a store call,
which the async gate's one-event-loop adapter in the tests cannot nest; it is the same code."""

from __future__ import annotations

from typing import Any

import pytest

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.support.sinks import RecordingSink
from tests.unit.test_fifo_gate import Recorder, keyed, make_gate


def test_a_thread_of_the_same_process_moving_the_group_on_meanwhile_is_no_store_loss(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two callbacks of one process on one group: while one reads the group's state, the other
    runs #2 and writes. The first read is older than what the process has now seen, but
    nothing was lost - no repair, no ALERT (found by a user's subscriber on a healthy Redis)."""

    class AnotherThreadMeanwhile(MemoryFifoStore):
        meanwhile: Any = None

        def load(self, *args: Any) -> Any:
            state = super().load(*args)
            step, self.meanwhile = self.meanwhile, None
            if step is not None:
                step()  # after the read, before this thread looks at it
            return state

    store, handler = AnotherThreadMeanwhile(), Recorder()
    gate = make_gate(handler, ManualClock(), RecordingSink(), store)
    gate.deliver(keyed("g", 1, "k1"), "g", 1)
    store.meanwhile = lambda: gate.deliver(keyed("g", 2, "k2"), "g", 2)
    gate.deliver(keyed("g", 3, "k3"), "g", 3)
    gate.sweep("g")
    outcomes = [getattr(r, "decision", {}).get("outcome") for r in caplog.records]
    assert "store_rollback" not in outcomes  # an ERROR: caplog records it when it happens
    assert handler.seen["g"] == [1, 2, 3]


def test_a_siblings_write_that_the_store_loses_during_the_read_is_still_caught(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The other side of reading the witness first: while this read is under way a sibling
    runs #2 and writes, and then the store loses that write (a failover). The read matches
    what this thread saw before it - but not what the process has seen since: it is read
    again, the loss is repaired, and the redelivered #2 does not run twice."""

    class SiblingWriteThenLoss(MemoryFifoStore):
        meanwhile: Any = None

        def load(self, *args: Any) -> Any:
            step, self.meanwhile = self.meanwhile, None
            if step is not None:
                states, parked = dict(self._states), dict(self._parked)
                step()  # a sibling thread runs #2 and writes
                self._states, self._parked = states, parked  # the store loses that write
            return super().load(*args)

    store, handler = SiblingWriteThenLoss(), Recorder()
    gate = make_gate(handler, ManualClock(), RecordingSink(), store)
    gate.deliver(keyed("g", 1, "k1"), "g", 1)
    store.meanwhile = lambda: gate.deliver(keyed("g", 2, "k2"), "g", 2)
    gate.deliver(keyed("g", 2, "k2"), "g", 2)  # the redelivery of #2, on this thread
    assert handler.seen["g"] == [1, 2]
    outcomes = [getattr(r, "decision", {}).get("outcome") for r in caplog.records]
    assert "store_rollback" in outcomes  # a real loss: said, and repaired
    assert store.load("consumer-a", "g").last_processed == 2
