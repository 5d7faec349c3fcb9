"""``Consumer.stop(timeout)`` with an ``async def`` handler still running when the timeout ends.

The Consumer runs an async handler on an event loop of its own, which ends with the stop. A
handler still running then was left pending on a closed loop ("Task was destroyed but it is
pending!"): never finished, never cancelled, so its ``finally`` / ``async with`` cleanup (a
connection to give back, a transaction to roll back) never ran. Found as a new user on the
emulator, stopping a consumer in the middle of a slow handler. It is now cancelled before the
loop ends and its cleanup runs; its message, unsettled, is delivered again (to the next
consumer: the run is not recorded)."""

from __future__ import annotations

import asyncio
import threading

import pytest
from google.cloud import pubsub_v1

from pubsub_toolkit import Consumer, ConsumerSettings, MessageProcessor, Settings
from pubsub_toolkit.message import Message


def test_a_stop_that_times_out_cancels_the_async_handler_still_running(
    request: pytest.FixtureRequest, pubsub_emulator: str, project_id: str
) -> None:
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    topic = publisher.create_topic(name=f"projects/{project_id}/topics/final").name
    subscription = f"projects/{project_id}/subscriptions/final-sub"
    subscriber.create_subscription(request={"name": subscription, "topic": topic})
    subscriber.close()
    started = threading.Event()
    cleaned: list[str] = []

    async def handler(message: Message) -> None:
        started.set()
        try:
            await asyncio.Event().wait()  # never finishes on its own
        finally:
            await asyncio.sleep(0)  # an awaited cleanup, as closing a connection is
            cleaned.append(message.data.decode())

    settings = Settings(
        project=project_id,
        final_topic="final",
        dead_letter_topic="dead-letter",
        store_backend="redis",
        redis_url=request.getfixturevalue("redis_url"),
    )
    processor = MessageProcessor.from_settings(
        settings, ConsumerSettings(consumer_id=f"c-{project_id}"), handler
    )
    consumer = Consumer(subscription, processor)
    consumer.start()
    try:
        publisher.publish(topic, b"stuck", dedup_key="stuck").result(timeout=30)
        assert started.wait(30), "the handler never started"
    finally:
        finished_in_time = consumer.stop(timeout=1)
    assert finished_in_time is False  # the handler was still running
    assert cleaned == ["stuck"]  # cancelled, and its cleanup ran before stop() returned
