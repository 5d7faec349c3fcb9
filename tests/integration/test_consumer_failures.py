"""The Consumer keeps going after failures outside the handler, on the Pub/Sub emulator.

* A few seconds of FIFO store outage while a batch of a group is queued: the group must not
  stay marked active (wedged) in the same Consumer - the deliveries caught by the outage are
  nacked, redelivered and handled in order once the store answers again.
* A user's ``on_outcome`` listener that raises: logged, the message stays settled as decided
  and the group's later messages still run (in the Consumer and in the AsyncConsumer).

Each test has its own project, so its subscription is fresh (a stopped streaming pull leaves
the emulator's subscription stuck). The store is the project's memory store made to raise the
project's StoreUnavailableError while an outage is on (our own protocol, in process).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from datetime import timedelta
from typing import Any

import pytest
from google.cloud import pubsub_v1

from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.consumer.gate_async import AsyncFifoGate
from pubsub_toolkit.consumer.processor import MessageProcessor
from pubsub_toolkit.consumer.processor_async import AsyncMessageProcessor
from pubsub_toolkit.consumer.subscriber import Consumer
from pubsub_toolkit.consumer.subscriber_async import AsyncConsumer
from pubsub_toolkit.core.fifo_policy import GatePolicy
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor
from pubsub_toolkit.dedup.idempotent_async import AsyncIdempotentProcessor
from pubsub_toolkit.errors import StoreUnavailableError
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.dedup.memory import AsyncMemoryDedupStore, MemoryDedupStore
from pubsub_toolkit.stores.fifo_state.base import GroupState
from pubsub_toolkit.stores.fifo_state.memory import AsyncMemoryFifoStore, MemoryFifoStore
from tests.support.waiting import wait_until


class OutageStore(MemoryFifoStore):
    """The memory FIFO store; while ``refuse`` is above 0 each call (but listing the groups)
    raises StoreUnavailableError and counts down: an outage that ends by itself."""

    def __init__(self) -> None:
        super().__init__()
        self.refuse = 0
        self.refused = 0
        self._outage = threading.Lock()

    def _check(self) -> None:
        with self._outage:
            if self.refuse > 0:
                self.refuse -= 1
                self.refused += 1
                raise StoreUnavailableError("the test's store outage")

    def load(self, consumer: str, group: str) -> GroupState:
        self._check()
        return super().load(consumer, group)

    def save(
        self, consumer: str, group: str, state: GroupState, expected: GroupState
    ) -> GroupState | None:
        self._check()
        return super().save(consumer, group, state, expected)

    def park(self, consumer: str, group: str, seq: int, message: Message) -> None:
        self._check()
        super().park(consumer, group, seq, message)

    def parked_message(self, consumer: str, group: str, seq: int) -> Message | None:
        self._check()
        return super().parked_message(consumer, group, seq)

    def unpark(self, consumer: str, group: str, seq: int) -> None:
        self._check()
        super().unpark(consumer, group, seq)


class CountingSubscriber(pubsub_v1.SubscriberClient):  # type: ignore[misc]
    """The real client; counts the deliveries it hands to the consumer's callback."""

    def __init__(self) -> None:
        super().__init__()
        self.arrivals = 0

    def subscribe(self, subscription: str, callback: Any, **kwargs: Any) -> Any:
        def counted(received: Any) -> None:
            self.arrivals += 1
            callback(received)

        return super().subscribe(subscription, counted, **kwargs)


def _subscription(project: str) -> tuple[str, str]:
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    topic = publisher.create_topic(name=f"projects/{project}/topics/final").name
    name = f"projects/{project}/subscriptions/final-sub"
    subscriber.create_subscription(request={"name": name, "topic": topic})
    subscriber.close()
    return topic, name


def _publish(topic: str, group: str, seqs: range) -> None:
    publisher = pubsub_v1.PublisherClient()
    futures = [
        publisher.publish(topic, f"{group}:{s}".encode(), fifo_group=group, fifo_seq=str(s))
        for s in seqs
    ]
    for future in futures:
        future.result(timeout=30)


def _processor(store: MemoryFifoStore, handler: Any, batch: int) -> MessageProcessor:
    dedup = IdempotentProcessor(
        MemoryDedupStore(), namespace="c", lease=timedelta(seconds=30), ttl=timedelta(hours=1)
    )
    # A short lease: a run the outage cut off (its advance not recorded) is taken over by the
    # sweeper when its lease ends, as designed; the test need not wait the default minute.
    policy = GatePolicy(lease=timedelta(seconds=5))
    gate = FifoGate(store, consumer="c", handler=handler, batch=batch, policy=policy)
    return MessageProcessor(handler=handler, dedup=dedup, gate=gate)


def test_a_store_outage_in_batch_mode_does_not_wedge_the_group(
    pubsub_emulator: str, project_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    topic, subscription = _subscription(project_id)
    store = OutageStore()
    subscriber = CountingSubscriber()
    handled: list[int] = []
    first = threading.Event()

    def handler(messages: list[Message]) -> None:
        seqs = [int(m.attributes["fifo_seq"]) for m in messages]
        if seqs == [1] and not first.is_set():
            first.set()
            # Messages 2-10 queue behind this one (so they run as one batch next), then the
            # store goes away for a while: the advance past 1 and the batch's turn both fail.
            wait_until(lambda: subscriber.arrivals >= 10, what="2-10 to be queued")
            store.refuse = 30
        handled.extend(seqs)

    processor = _processor(store, handler, batch=10)
    caplog.set_level(logging.WARNING)
    outcomes: list[str] = []
    with Consumer(
        subscription,
        processor,
        concurrency=2,
        subscriber=subscriber,
        on_outcome=lambda _message, outcome: outcomes.append(outcome),
    ):
        _publish(topic, "g", range(1, 2))
        wait_until(first.is_set, what="1 to run")
        _publish(topic, "g", range(2, 11))
        wait_until(
            lambda: store.refuse == 0 and processor.gate.store.load("c", "g").last_processed == 10,
            timeout=60,
            what="the group to progress after the outage",
        )
    # In order; 1 ran again (its advance failed after it ran: at least once, in order).
    assert store.refused == 30
    assert sorted(set(handled)) == list(range(1, 11))
    assert handled == sorted(handled)
    # The consumer settled the batch caught by the outage itself (nacked, told, logged at
    # ERROR), not only the convoy's net under it.
    assert "retry" in outcomes
    assert any(
        r.name == "pubsub_toolkit.consumer.subscriber" and "nacked" in r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.ERROR
    )


def test_a_raising_outcome_listener_is_logged_and_does_not_wedge_the_group(
    pubsub_emulator: str, project_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    topic, subscription = _subscription(project_id)
    handled: list[int] = []
    heard: list[str] = []

    def handler(message: Message) -> None:
        handled.append(int(message.attributes["fifo_seq"]))

    def listener(message: Message, outcome: str) -> None:
        heard.append(outcome)
        raise RuntimeError("the listener's own bug")

    processor = _processor(MemoryFifoStore(), handler, batch=1)
    caplog.set_level(logging.WARNING)
    with Consumer(subscription, processor, concurrency=2, on_outcome=listener):
        _publish(topic, "g", range(1, 6))
        wait_until(lambda: len(handled) >= 5, timeout=60, what="the whole group")
        wait_until(lambda: len(heard) >= 5, what="every outcome told")
    assert handled == [1, 2, 3, 4, 5]  # each once: acked despite the listener
    assert processor.gate.store.load("c", "g").last_processed == 5
    assert any("on_outcome" in r.getMessage() for r in caplog.records)


def test_a_raising_outcome_listener_does_not_strand_an_async_consumers_group(
    pubsub_emulator: str, project_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    topic, subscription = _subscription(project_id)
    handled: list[int] = []
    heard: list[str] = []

    async def handler(message: Message) -> None:
        handled.append(int(message.attributes["fifo_seq"]))

    def listener(message: Message, outcome: str) -> None:
        heard.append(outcome)
        raise RuntimeError("the listener's own bug")

    async def main() -> None:
        dedup = AsyncIdempotentProcessor(
            AsyncMemoryDedupStore(), namespace="c", lease=timedelta(seconds=30), ttl=timedelta(1)
        )
        gate = AsyncFifoGate(AsyncMemoryFifoStore(), consumer="c", handler=handler)
        processor = AsyncMessageProcessor(handler=handler, dedup=dedup, gate=gate)
        async with AsyncConsumer(subscription, processor, on_outcome=listener):
            await asyncio.to_thread(_publish, topic, "g", range(1, 6))
            await asyncio.to_thread(
                wait_until, lambda: len(heard) >= 5, timeout=60, what="the whole group"
            )

    caplog.set_level(logging.WARNING)
    asyncio.run(main())
    assert handled == [1, 2, 3, 4, 5]
    assert any("on_outcome" in r.getMessage() for r in caplog.records)
