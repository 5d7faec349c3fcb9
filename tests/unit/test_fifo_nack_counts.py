"""A handler's own ``nack()`` (``@idempotent``'s ``DeliveredMessage.nack``, which raises
``NackRequested``) counts toward poison in a FIFO group, as Pub/Sub counts a nack as a delivery
attempt. Found by the simulation's ``idempotent_callback`` shape with a callback that ``nack()``s
every failure: the gate treated the nack as a transient error it never counts, so a poison head
was retried for ever and its group never moved, with no ALERT (seeds 27, 44, 51, ...)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate import FifoGate, HandlerFailedError
from pubsub_toolkit.core.fifo_policy import GateOutcome, GatePolicy, PoisonPolicy
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.decorators import DeliveredMessage
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.support.sinks import RecordingSink

DLQ = "projects/p/topics/dlq"


def test_a_handler_that_nacks_a_poison_head_dead_letters_it_after_max_attempts() -> None:
    clock, sink, log = ManualClock(), RecordingSink(), DecisionLog("c")
    ran: list[int] = []

    def callback(message: Message) -> None:
        seq = int(message.attributes["fifo_seq"])
        if seq == 2:
            DeliveredMessage(message.data, message.attributes, message.message_id).nack()
        ran.append(seq)

    gate = FifoGate(
        MemoryFifoStore(),
        consumer="c",
        handler=callback,
        dead_letters=DeadLetterer(sink, DLQ, log),
        policy=GatePolicy(max_attempts=3, poison=PoisonPolicy.SKIP),
        clock=clock,
        log=log,
    )

    def deliver(seq: int) -> object:
        return gate.deliver(Message(b"m", {"fifo_group": "g", "fifo_seq": str(seq)}), "g", seq)

    deliver(1)
    with pytest.raises(HandlerFailedError):  # the nacked head: the caller nacks, a copy parks
        deliver(2)
    deliver(3)
    outcomes = []
    for _ in range(20):  # bounded: the backoff doubles, so three attempts need a few sweeps
        clock.advance(timedelta(seconds=30))
        outcomes.append(gate.sweep("g").outcome)
        if GateOutcome.DEAD_LETTERED in outcomes:
            break
    assert GateOutcome.DEAD_LETTERED in outcomes, outcomes
    [dead] = sink.on(DLQ)
    assert dead.attributes["error_reason"] == "fifo_poison"
    assert dead.attributes["fifo_seq"] == "2"
    gate.sweep("g")
    assert ran == [1, 3]
