"""The operator's route for a ``relay_handover_unconfirmed`` ALERT (review finding F3 on issue 24).

The ALERT carries the message whole because the task that took it over may not exist. It told
the operator to "publish the message from the line": through ingress with the same
``dedup_key`` that is acked as a duplicate (ingress still keeps the original publish's record,
``DEDUP_TTL``) and never delivered - lost silently. The safe route is a replay, as ``dlq
replay`` does one: mint the line's ``replay_id`` for the key in the store ingress reads, then
publish data and attributes plus ``replay_id`` to the ingress topic. Ingress releases it through
the message's own release record: a cancelled message is not published, and a copy the task
releases before or after is a duplicate - the consumer's handler runs it once.

Ingress and the relay share one in-memory store (behind the relay's outage switch); the queue
is :mod:`tests.unit.test_relay_handover_outcomes`'s; the consumer is a ``MessageProcessor`` on
stores of its own.
"""

from __future__ import annotations

import base64
from datetime import timedelta
from typing import Any

import pytest

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.consumer.processor import MessageProcessor
from pubsub_toolkit.core.fifo_policy import GatePolicy
from pubsub_toolkit.core.ingress import IngressOutcome
from pubsub_toolkit.dead_letters.replay import mint
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor
from pubsub_toolkit.delay.cancel import cancel
from pubsub_toolkit.delay.relay import RelayOutcome
from pubsub_toolkit.ingress.pipeline import Ingress
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.unit.test_relay_handover_outcomes import (
    DEDUP_TTL,
    DLQ,
    DUE,
    FINAL,
    World,
    alerts,
)

CONSUMER = "consumer-a"


class Consumer:
    """A consumer deduplicating by ``dedup_key`` on stores of its own; ``ran``: what it ran."""

    def __init__(self, clock: ManualClock) -> None:
        self.ran: list[bytes] = []
        log = DecisionLog(CONSUMER)
        self._processor = MessageProcessor(
            handler=lambda m: self.ran.append(m.data),
            dedup=IdempotentProcessor(
                MemoryDedupStore(clock),
                namespace=CONSUMER,
                lease=timedelta(seconds=30),
                ttl=DEDUP_TTL,
                clock=clock,
            ),
            gate=FifoGate(
                MemoryFifoStore(clock=clock),
                consumer=CONSUMER,
                handler=lambda _m: None,
                policy=GatePolicy(completed_retention=DEDUP_TTL),
                clock=clock,
                log=log,
            ),
        )
        self._seen = 0

    def drain(self, world: World) -> None:
        """Receive what reached the final topic since the last drain."""
        published = world.sink.on(FINAL)
        for index, message in enumerate(published[self._seen :], start=self._seen):
            self._processor.process(
                Message(message.data, message.attributes, message_id=f"final-{index}")
            )
        self._seen = len(published)


class Stack:
    """Ingress and the relay on one store; a message published before its due time."""

    def __init__(self) -> None:
        self.world = World()
        self.clock = self.world.clock
        self.clock.advance(-timedelta(hours=1))
        self.ingress = Ingress(
            store=self.world.store,
            sink=self.world.sink,
            final_topic=FINAL,
            dead_letter_topic=DLQ,
            lease=timedelta(seconds=30),
            ttl=DEDUP_TTL,
            scheduler=self.world.queue,
            clock=self.clock,
        )
        self.consumer = Consumer(self.clock)
        published = Message(
            b"payload", {"dedup_key": "k", "deliver_at": attr.format_time(DUE)}, message_id="m-1"
        )
        assert self.ingress.handle(published).outcome is IngressOutcome.SCHEDULED
        [(_, self.body)] = self.world.queue.tasks.items()
        self.world.queue.tasks = {}  # Cloud Tasks runs it: every attempt fails (store down)
        self.clock.advance(timedelta(hours=2))

    def unconfirmed(self, fault: str, caplog: pytest.LogCaptureFixture) -> dict[str, Any]:
        """The last attempt, the store down and every create of the next task in doubt."""
        self.world.queue.faults = [fault] * 10
        caplog.set_level("INFO")
        assert self.world.last_attempt(self.body) is RelayOutcome.RESCHEDULED
        self.world.queue.faults = []
        [alert] = alerts(caplog, "relay_handover_unconfirmed")
        assert self.world.sink.on(FINAL) == [] and self.world.sink.on(DLQ) == []
        return alert

    def replay_from(self, alert: dict[str, Any]) -> IngressOutcome:
        """The ALERT's route: mint its replay_id, publish data and attributes to ingress."""
        attributes = dict(alert["attributes"])
        mint(self.world.store, alert["replay_id"], attributes[attr.DEDUP_KEY])
        attributes[attr.REPLAY_ID] = alert["replay_id"]
        data = base64.b64decode(alert["data_base64"])
        return self.ingress.handle(Message(data, attributes, message_id="m-operator")).outcome


def test_publishing_the_line_again_through_ingress_is_acked_as_a_duplicate_and_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stack = Stack()
    alert = stack.unconfirmed("fail", caplog)  # no task was made after all
    again = Message(base64.b64decode(alert["data_base64"]), alert["attributes"], message_id="m-2")
    assert stack.ingress.handle(again).outcome is IngressOutcome.DUPLICATE
    assert stack.world.sink.on(FINAL) == []  # why the ALERT names the replay route instead


@pytest.mark.parametrize(
    ("fault", "task_first", "task_later"),
    [
        ("fail", False, []),  # no task was made: the replay is the only copy
        ("timeout", False, [RelayOutcome.DUPLICATE]),  # made: it runs after the replay
        ("timeout", True, []),  # made: it released the message before the operator came
    ],
)
def test_the_alerts_replay_route_reaches_the_handler_once_whether_or_not_the_task_exists(
    fault: str,
    task_first: bool,
    task_later: list[RelayOutcome],
    caplog: pytest.LogCaptureFixture,
) -> None:
    stack = Stack()
    alert = stack.unconfirmed(fault, caplog)
    if task_first:
        assert stack.world.run_queued() == [RelayOutcome.PUBLISHED]
        stack.consumer.drain(stack.world)
    assert stack.replay_from(alert) is IngressOutcome.PUBLISHED
    assert stack.replay_from(alert) is IngressOutcome.DUPLICATE  # the operator did it twice
    # A task that turns out to exist and runs later finds the release record: nothing more.
    assert stack.world.run_queued() == task_later
    stack.consumer.drain(stack.world)
    assert stack.consumer.ran == [b"payload"]
    assert stack.world.sink.on(DLQ) == []


def test_the_replay_route_does_not_deliver_a_message_cancelled_meanwhile(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class NoTasks:
        def delete(self, dedup_key: str, hop: int = 0) -> bool:
            return False

    stack = Stack()
    alert = stack.unconfirmed("timeout", caplog)
    assert not cancel("k", store=stack.world.store, scheduler=NoTasks()).already_delivered
    assert stack.replay_from(alert) is IngressOutcome.CANCELLED
    assert stack.world.run_queued() == [RelayOutcome.CANCELLED]
    stack.consumer.drain(stack.world)
    assert stack.consumer.ran == []
