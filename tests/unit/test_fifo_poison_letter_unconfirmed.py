"""A poison verdict is final: when its dead letter is not confirmed (the publish timed out after
the topic had accepted it), the next run of the number sends the letter again and moves on - it
never calls the handler a further time (simulation seed 232256: L1 dead-lettered ``fifo_poison``
after 5 failures, the letter's publish timed out, and a sweep a minute later ran L1: both an
effect and a dead letter)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pytest

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate import HandlerFailedError
from pubsub_toolkit.core.fifo_policy import GateOutcome, PoisonPolicy
from pubsub_toolkit.errors import TransientError
from pubsub_toolkit.message import OutboundMessage
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.support.sinks import RecordingSink
from tests.unit.test_fifo_gate import DLQ, Recorder, make_gate, msg


@dataclass
class AcceptedThenTimedOut(RecordingSink):
    """Records the next ``time_out_next`` publishes, then raises as a timed-out publish would:
    the topic has the message, the caller does not know it."""

    time_out_next: int = 0

    def publish(self, topic: str, message: OutboundMessage) -> str:
        message_id = super().publish(topic, message)
        if self.time_out_next > 0:
            self.time_out_next -= 1
            raise TransientError(f"publish to {topic} timed out (the topic had accepted it)")
        return message_id


@pytest.mark.parametrize("poison", [PoisonPolicy.SKIP, PoisonPolicy.BLOCK])
def test_a_poison_verdict_whose_letter_timed_out_is_not_run_again(poison: PoisonPolicy) -> None:
    """#1 fails twice (max_attempts=2): poison. Its letter's publish times out after it was
    accepted, so the sweep fails with the group still at #1. The handler then recovers: the
    next sweep must send the letter again (a repeat of an unconfirmed output, the two-phase
    window) and go on as the policy says - not run #1 (before: #1 ran, next to its letter)."""
    clock, handler, sink = ManualClock(), Recorder(), AcceptedThenTimedOut()
    store = MemoryFifoStore()
    gate = make_gate(handler, clock, sink, store, max_attempts=2, poison=poison)
    handler.failing.add(("g", 1))
    assert gate.deliver(msg("g", 2), "g", 2).outcome is GateOutcome.PARKED
    with pytest.raises(HandlerFailedError):
        gate.deliver(msg("g", 1), "g", 1)  # attempt 1 of 2; parked for the sweeper
    clock.advance(timedelta(seconds=5))
    sink.time_out_next = 1
    with pytest.raises(TransientError):
        gate.sweep("g")  # attempt 2: poison; the letter is published, its answer lost
    assert [m.attributes["error_reason"] for m in sink.on(DLQ)] == ["fifo_poison"]
    handler.failing.clear()  # whatever the handler would do now, the verdict stands
    clock.advance(timedelta(seconds=61))  # the failed run's lease has expired
    gate.sweep("g")
    assert 1 not in handler.seen["g"]
    assert [m.attributes["error_reason"] for m in sink.on(DLQ)] == ["fifo_poison"] * 2
    state = store.load("consumer-a", "g")
    if poison is PoisonPolicy.SKIP:
        assert handler.seen["g"] == [2]  # skipped: the group went on
        assert state.last_processed == 2
    else:
        assert handler.seen["g"] == []  # blocked at #1 until an operator acts
        assert state.blocked_at == 1
