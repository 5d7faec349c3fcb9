"""A handler that outlives its FIFO lease is fenced even while the new holder's run is still
under way: its advance is refused (StaleClaimError, the "outlived its lease" ALERT) and the new
holder keeps the group.

The gate's state write checks the lease token (``FifoGate._update``); the advance's own check
(a number already passed) only catches a stale writer once the new holder has advanced. Before
that, without the token check, the stale writer would advance the group under the new holder's
feet and free its lease, so a third process could run the next number while the new holder
still runs this one. (Hand-made bug H1 of issue 24's review, ``tests/simulation/mutations.py``:
the default schedules' handlers take no time, so no lease runs out under a run.)
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.errors import StaleClaimError
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore

LEASE = timedelta(seconds=60)


def test_a_run_that_outlived_its_lease_cannot_advance_under_the_new_holder() -> None:
    clock = ManualClock()
    store = MemoryFifoStore(clock)
    taken: list[int] = []

    def slow(message: Message) -> None:
        # The run outlives its lease; another worker takes the group and starts its own run.
        clock.advance(LEASE + timedelta(seconds=1))
        state = store.load("c", "g")
        holder = replace(state, lease_token=state.lease_token + 1, lease_until=clock.now() + LEASE)
        saved = store.save("c", "g", holder, state)
        assert saved is not None
        taken.append(saved.lease_token)

    gate = FifoGate(store, consumer="c", handler=slow, clock=clock)
    message = Message(b"g:1", {"fifo_group": "g", "fifo_seq": "1", "dedup_key": "g#1"})
    with pytest.raises(StaleClaimError, match="outlived its lease"):
        gate.deliver(message, "g", 1)
    state = store.load("c", "g")
    assert (state.last_processed, state.lease_token) == (0, taken[0])  # the new holder's
    assert state.lease_live(clock.now())
