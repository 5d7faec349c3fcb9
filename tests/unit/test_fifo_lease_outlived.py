"""A FIFO handler that outlives the group's lease (``GatePolicy.lease``): the documented
reliance is "handlers finish within their lease"; past it another worker may take the group
over and run the number again. The gate must then say so with an ALERT naming the message
(seeds 1507, 1631 of ``slow_handler``: a number ran twice, the late run's advance refused,
nothing said) - and must not take over a run its own process still has under way."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.core.fifo_policy import GateOutcome, GatePolicy
from pubsub_toolkit.errors import StaleClaimError, TransientError
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore

LEASE = timedelta(seconds=30)


def keyed(seq: int) -> Message:
    attributes = {"fifo_group": "g", "fifo_seq": str(seq), "dedup_key": f"k{seq}"}
    return Message(f"{seq}".encode(), attributes, message_id=f"m{seq}")


def gate_on(
    store: MemoryFifoStore, clock: ManualClock, handler: Callable[[Message], None]
) -> FifoGate:
    return FifoGate(
        store, consumer="c", handler=handler, clock=clock, policy=GatePolicy(lease=LEASE)
    )


def alerts(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    found = [getattr(r, "decision", None) for r in caplog.records]
    return [d for d in found if isinstance(d, dict) and d.get("alert")]


def test_a_run_that_outlived_its_lease_and_was_taken_over_is_an_alert_naming_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock()
    store = MemoryFifoStore(clock=clock)
    ran: list[str] = []
    other = gate_on(store, clock, lambda m: ran.append(f"other {m.data.decode()}"))

    def slow(message: Message) -> None:
        ran.append(f"slow {message.data.decode()}")
        clock.advance(LEASE * 2)  # outlives the lease; meanwhile another process takes over
        assert other.deliver(keyed(1), "g", 1).outcome is GateOutcome.PROCESSED

    with pytest.raises(StaleClaimError):
        gate_on(store, clock, slow).deliver(keyed(1), "g", 1)
    assert ran == ["slow 1", "other 1"]  # the documented risk: it ran twice
    said = [a for a in alerts(caplog) if a.get("fifo_seq") == 1]
    assert said and said[0]["fifo_group"] == "g" and said[0]["dedup_key"] == "k1"
    assert store.load("c", "g").last_processed == 1


def test_its_own_process_does_not_take_over_a_run_still_under_way() -> None:
    clock = ManualClock()
    store = MemoryFifoStore(clock=clock)
    ran: list[int] = []
    answers: list[GateOutcome] = []
    gate: FifoGate

    def slow(message: Message) -> None:
        ran.append(int(message.data))
        if len(ran) == 1:
            clock.advance(LEASE * 2)  # past the lease: the store would let anyone take over
            answers.append(gate.deliver(keyed(1), "g", 1).outcome)  # a redelivery meanwhile
            answers.append(gate.sweep("g").outcome)  # this process's own sweeper meanwhile

    gate = gate_on(store, clock, slow)
    assert gate.deliver(keyed(1), "g", 1).outcome is GateOutcome.PROCESSED
    assert ran == [1]  # once: the run under way was this process's own
    assert answers[0] is not GateOutcome.PROCESSED and answers[1] is GateOutcome.IDLE
    assert store.load("c", "g").last_processed == 1
    gate.sweep("g")  # the copy the redelivery parked is a duplicate now
    assert ran == [1] and store.load("c", "g").parked == ()


def test_a_counter_restart_waits_for_this_processs_run_that_outlived_its_lease() -> None:
    """Found in review: a new-epoch message reaching the process that is still running the
    old sequence's number past its lease restarted the group under the run - its advance was
    refused and its redelivery dead-lettered ``fifo_sequence_restarted``, although it ran."""
    clock = ManualClock()
    store = MemoryFifoStore(clock=clock)
    ran: list[str] = []
    answers: list[str] = []
    gate: FifoGate

    def new_epoch(seq: int) -> Message:
        attributes = {
            "fifo_group": "g",
            "fifo_seq": str(seq),
            "fifo_epoch": "2",
            "dedup_key": f"n{seq}",
        }
        return Message(f"n{seq}".encode(), attributes, message_id=f"n{seq}")

    def slow(message: Message) -> None:
        ran.append(message.data.decode())
        if message.data == b"1":
            clock.advance(LEASE * 2)  # past the lease, still running here
            try:
                answers.append(gate.deliver(new_epoch(1), "g", 1).outcome.value)
            except TransientError:
                answers.append("wait")

    first = Message(b"1", {**keyed(1).attributes, "fifo_epoch": "1"}, message_id="m1")
    gate = gate_on(store, clock, slow)
    assert gate.deliver(first, "g", 1).outcome is GateOutcome.PROCESSED
    assert answers == ["wait"]  # the restart waits for the run under way
    assert store.load("c", "g").last_processed == 1
    assert ran == ["1"]
