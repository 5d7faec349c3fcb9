"""An ``async def`` handler end to end: publish through the Pub/Sub emulator, AsyncConsumer
(streaming pull into one event loop) with AsyncMessageProcessor on the async Redis stores
(real redis-server) and the async Firestore stores (emulator): a FIFO group shuffled and with
re-published duplicates runs in order, once; a duplicate outside any group runs once."""

from __future__ import annotations

import asyncio
import random
import threading
from datetime import timedelta

import pytest
from google.cloud import pubsub_v1

from pubsub_toolkit import Consumer, ConsumerSettings, MessageProcessor, Settings
from pubsub_toolkit.consumer.gate_async import AsyncFifoGate
from pubsub_toolkit.consumer.processor_async import AsyncMessageProcessor
from pubsub_toolkit.consumer.subscriber_async import AsyncConsumer
from pubsub_toolkit.dedup.idempotent_async import AsyncIdempotentProcessor
from pubsub_toolkit.message import Message
from tests.support.async_stores import async_dedup_factory, async_fifo_factory, loop
from tests.support.waiting import wait_until

__all__ = ["loop"]

SEQS = 30


def _subscription(project: str) -> tuple[str, str]:
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    topic = publisher.create_topic(name=f"projects/{project}/topics/final").name
    name = f"projects/{project}/subscriptions/async-sub"  # fresh per test (unique project)
    subscriber.create_subscription(request={"name": name, "topic": topic})
    subscriber.close()
    return topic, name


def _publish(topic: str) -> None:
    rng = random.Random(14)
    batch = [("g", s) for s in range(1, SEQS + 1)]
    batch += rng.sample(batch, 5)  # re-published copies: duplicates of grouped messages
    rng.shuffle(batch)
    publisher = pubsub_v1.PublisherClient()
    futures = [
        publisher.publish(
            topic, f"g:{s}".encode(), fifo_group=g, fifo_seq=str(s), dedup_key=f"g#{s}"
        )
        for g, s in batch
    ]
    futures += [publisher.publish(topic, b"solo", dedup_key="solo") for _ in range(2)]
    for future in futures:
        future.result(timeout=30)


@pytest.mark.parametrize("backend", ["redis", "firestore"])
def test_async_handler_end_to_end_in_order_once(
    request: pytest.FixtureRequest,
    loop: asyncio.AbstractEventLoop,
    pubsub_emulator: str,
    project_id: str,
    backend: str,
) -> None:
    topic, subscription = _subscription(project_id)
    dedup_store = async_dedup_factory(request, f"async-{backend}")()
    fifo_store = async_fifo_factory(request, f"async-{backend}")()
    seen: list[int] = []
    solo: list[str] = []
    handler_threads: set[int] = set()
    outcomes: list[str] = []

    async def main() -> None:
        everything, group_done = asyncio.Event(), asyncio.Event()

        async def handler(message: Message) -> str:
            handler_threads.add(threading.get_ident())
            await asyncio.sleep(0.001)  # awaited I/O inside the handler
            if "fifo_group" in message.attributes:
                seen.append(int(message.attributes["fifo_seq"]))
                if len(seen) >= SEQS:
                    group_done.set()
            else:
                solo.append(message.data.decode())
            return "ok"

        def on_outcome(message: Message, outcome: str) -> None:
            outcomes.append(outcome)
            if len(outcomes) >= SEQS + 5 + 2:  # every delivery answered (ack or nack)
                loop.call_soon_threadsafe(everything.set)

        gate = AsyncFifoGate(fifo_store, consumer="c", handler=handler)
        dedup = AsyncIdempotentProcessor(
            dedup_store, namespace="c", lease=timedelta(seconds=30), ttl=timedelta(hours=1)
        )
        processor = AsyncMessageProcessor(handler=handler, dedup=dedup, gate=gate)
        consumer = AsyncConsumer(
            subscription,
            processor,
            concurrency=8,
            on_outcome=on_outcome,
            sweep_interval=timedelta(milliseconds=200),
        )
        async with consumer:
            await asyncio.to_thread(_publish, topic)
            await asyncio.wait_for(everything.wait(), timeout=60)
            await asyncio.wait_for(group_done.wait(), timeout=30)  # (a parked head may run
            # in the sweeper, after its own delivery was answered)

    loop.run_until_complete(main())
    assert seen == list(range(1, SEQS + 1))  # in order, each once (duplicates skipped)
    assert solo == ["solo"]
    assert handler_threads == {threading.get_ident()}  # on the loop's thread, not a pool
    assert "duplicate" in outcomes


@pytest.mark.parametrize("backend", ["redis", "firestore"])
def test_consumer_runs_an_async_handler_from_settings_in_order_once(
    request: pytest.FixtureRequest,
    pubsub_emulator: str,
    project_id: str,
    monkeypatch: pytest.MonkeyPatch,
    backend: str,
) -> None:
    """The common case, with no Async* name: MessageProcessor.from_settings with an async def
    handler, run by the ordinary Consumer (start/stop sync) on its own event loop."""
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", project_id)  # the Firestore AsyncClient's project
    redis_url = request.getfixturevalue("redis_url") if backend == "redis" else None
    if backend == "firestore":
        request.getfixturevalue("firestore_emulator")
    topic, subscription = _subscription(project_id)
    seen: list[int] = []
    solo: list[str] = []
    loops: set[int] = set()
    outcomes: list[str] = []

    async def handler(message: Message) -> str:
        loops.add(id(asyncio.get_running_loop()))
        await asyncio.sleep(0.001)
        if "fifo_group" in message.attributes:
            seen.append(int(message.attributes["fifo_seq"]))
        else:
            solo.append(message.data.decode())
        return "ok"

    settings = Settings(
        project=project_id,
        final_topic="final",
        dead_letter_topic="dead-letter",
        store_backend=backend,  # type: ignore[arg-type]
        redis_url=redis_url,
        dedup_collection=f"dedup-{project_id}",
    )
    consumer_settings = ConsumerSettings(consumer_id=f"c-{project_id}")
    processor = MessageProcessor.from_settings(settings, consumer_settings, handler)
    assert not isinstance(processor, MessageProcessor)  # the async path, chosen for the user
    consumer = Consumer(
        subscription,
        processor,
        concurrency=8,
        sweep_interval=timedelta(milliseconds=200),
        on_outcome=lambda message, outcome: outcomes.append(outcome),
    )
    with consumer:
        _publish(topic)
        wait_until(
            lambda: len(seen) >= SEQS and len(outcomes) >= SEQS + 5 + 2,
            timeout=60,
            what="every delivery answered and the group run",
        )
    assert seen == list(range(1, SEQS + 1))  # in order, each once
    assert solo == ["solo"]
    assert len(loops) == 1  # one event loop ran every handler
    assert "duplicate" in outcomes
