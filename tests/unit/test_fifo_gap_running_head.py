"""The gap policy ``skip`` never passes over a head that arrived and ran under a lease.

A gap is a *missing* number (docs/concepts/fifo.md, "Gaps"). The gap clock starts when a later
number parks ahead of the head; when the head then arrives and is leased, it is not missing,
and it must not become "missing for ages" the moment its lease ends. Seed 103165 (the default
mix, ``slow_handler``): g2#3 parked at 15 s, #2 arrived at 137 s and ran under a 60 s lease in
a handler that took 191 s; at 356 s another process's sweep found the lease over and the gap
300 s old (counted from 15 s), skipped #2 and ran #3 and #4 - then #2's own run finished: its
effect after #4's (``fifo_order``), and its redelivery dead-lettered ``fifo_late_after_skip``
although it had run. Past its lease, a head that ran waits a whole gap timeout for its run or
redelivery before the policy passes over it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.core.fifo_policy import GapPolicy, GateOutcome, GatePolicy
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.support.sinks import RecordingSink

LEASE = timedelta(seconds=60)
GAP = timedelta(seconds=300)


class Crash(BaseException):
    """The process running the handler dies mid-run: nothing after it happens."""


def keyed(seq: int) -> Message:
    attributes = {"fifo_group": "g", "fifo_seq": str(seq), "dedup_key": f"k{seq}"}
    return Message(f"{seq}".encode(), attributes, message_id=f"m{seq}")


def gate_on(
    store: MemoryFifoStore, clock: ManualClock, handler: Callable[[Message], None]
) -> FifoGate:
    log = DecisionLog("c")
    return FifoGate(
        store,
        consumer="c",
        handler=handler,
        dead_letters=DeadLetterer(RecordingSink(), "projects/p/topics/dlq", log),
        policy=GatePolicy(lease=LEASE, gap=GapPolicy.SKIP, gap_timeout=GAP),
        clock=clock,
        log=log,
    )


def test_a_head_running_past_its_lease_is_not_skipped_as_a_gap() -> None:
    clock = ManualClock()
    store = MemoryFifoStore(clock=clock)
    ran: list[int] = []
    swept: list[GateOutcome] = []
    other = gate_on(store, clock, lambda m: ran.append(int(m.data)))
    assert other.deliver(keyed(1), "g", 1).outcome is GateOutcome.PROCESSED
    assert other.deliver(keyed(3), "g", 3).outcome is GateOutcome.PARKED  # the gap clock starts
    clock.advance(timedelta(seconds=120))

    def slow(message: Message) -> None:
        if message.data == b"2":
            # Past its lease, the gap 300 s old counted from #3's park: another process sweeps.
            clock.advance(timedelta(seconds=191))
            swept.append(other.sweep("g").outcome)
        ran.append(int(message.data))

    # #2's run advances (nobody took its lease over) and runs #3 parked behind it.
    outcome = gate_on(store, clock, slow).deliver(keyed(2), "g", 2).outcome
    assert outcome is GateOutcome.PROCESSED
    assert swept == [GateOutcome.IDLE]  # #2 arrived and runs: it is not missing
    assert ran == [1, 2, 3]
    state = store.load("c", "g")
    assert (state.last_processed, state.skipped) == (3, ())


def test_a_head_whose_run_died_is_skipped_a_gap_timeout_after_its_lease() -> None:
    clock = ManualClock()
    store = MemoryFifoStore(clock=clock)
    ran: list[int] = []
    other = gate_on(store, clock, lambda m: ran.append(int(m.data)))
    assert other.deliver(keyed(1), "g", 1).outcome is GateOutcome.PROCESSED
    assert other.deliver(keyed(3), "g", 3).outcome is GateOutcome.PARKED
    clock.advance(timedelta(seconds=240))

    def dies(message: Message) -> None:
        raise Crash

    with pytest.raises(Crash):  # #2 leased (its key recorded), then nothing more
        gate_on(store, clock, dies).deliver(keyed(2), "g", 2)
    # The lease over, the head waits for its redelivery a gap timeout, not a moment.
    clock.advance(LEASE + GAP - timedelta(seconds=1))
    assert other.sweep("g").outcome is GateOutcome.IDLE
    clock.advance(timedelta(seconds=1))
    assert other.sweep("g").outcome is GateOutcome.PROCESSED  # then the policy applies
    assert ran == [1, 3]
    state = store.load("c", "g")
    assert (state.last_processed, state.skipped) == (3, ((2, 2),))
