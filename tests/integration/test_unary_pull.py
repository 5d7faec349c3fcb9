"""UnaryPullSubscriber against the Pub/Sub emulator: the contract Consumer relies on.

Restarts on one subscription keep working (the streaming client's dead stream would take every
later message), flow control bounds what is held, a nack is at once deliverable again, leases
are extended past the ack deadline, and a missing subscription ends the future with NotFound.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from google.api_core import exceptions as gexc
from google.cloud import pubsub_v1

from pubsub_toolkit.config import ConsumerSettings, Settings
from pubsub_toolkit.consumer.processor import MessageProcessor
from pubsub_toolkit.consumer.subscriber import Consumer
from pubsub_toolkit.message import Message
from pubsub_toolkit_cli.unary_pull import UnaryPullSubscriber
from tests.support.waiting import wait_until


def make_subscription(project: str, name: str, ack_deadline: int = 10) -> tuple[str, str]:
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    topic = publisher.create_topic(name=f"projects/{project}/topics/{name}").name
    subscription = subscriber.create_subscription(
        name=f"projects/{project}/subscriptions/{name}",
        topic=topic,
        ack_deadline_seconds=ack_deadline,
    ).name
    subscriber.close()
    return topic, subscription


def publish(topic: str, *payloads: bytes, **attributes: str) -> None:
    publisher = pubsub_v1.PublisherClient()
    for future in [publisher.publish(topic, p, **attributes) for p in payloads]:
        future.result(timeout=30)


def test_a_consumer_restarted_five_times_on_one_subscription_gets_every_message(
    pubsub_emulator: str, project_id: str
) -> None:
    topic, subscription = make_subscription(project_id, "restarts")
    env = {
        "GOOGLE_CLOUD_PROJECT": project_id,
        "PUBSUB_TOOLKIT_FINAL_TOPIC": "final",
        "PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC": "dead-letter",
        "PUBSUB_TOOLKIT_STORE_BACKEND": "memory",
        "PUBSUB_TOOLKIT_CONSUMER_ID": "restarts",
    }
    seen: list[bytes] = []

    def handler(message: Message) -> None:
        seen.append(message.data)

    for round_ in range(5):
        publish(topic, f"r{round_}".encode(), dedup_key=f"r{round_}")
        processor = MessageProcessor.from_settings(
            Settings.from_env(env), ConsumerSettings.from_env(env), handler
        )
        with Consumer(subscription, processor, subscriber=UnaryPullSubscriber()):
            wait_until(lambda r=round_: len(seen) > r, timeout=30, what=f"round {round_}'s message")
    assert seen == [f"r{i}".encode() for i in range(5)]


def test_flow_control_nack_and_lease_extension(pubsub_emulator: str, project_id: str) -> None:
    topic, subscription = make_subscription(project_id, "leases", ack_deadline=10)
    publish(topic, *(f"m{i}".encode() for i in range(5)))
    held: list[Any] = []
    lock = threading.Lock()

    def keep(message: Any) -> None:
        with lock:
            held.append(message)

    subscriber = UnaryPullSubscriber()
    future = subscriber.subscribe(
        subscription, keep, flow_control=pubsub_v1.types.FlowControl(max_messages=2)
    )
    try:
        wait_until(lambda: len(held) == 2, timeout=30, what="two messages held")
        # Flow control is full: nothing more arrives while both are unsettled.
        time.sleep(1)  # a window in which a third message must NOT arrive (nothing to await)
        assert len(held) == 2
        nacked = held[0]
        nacked.nack()  # room for one more, and the nacked one is deliverable again at once
        wait_until(lambda: len(held) == 3, timeout=10, what="a third message after the nack")
        # Hold one across two ack deadlines: the leases keep it from being redelivered.
        kept = held[1]
        deadline = time.monotonic() + 25
        while time.monotonic() < deadline:
            with lock:
                ids = [m.message_id for m in held]
            assert ids.count(kept.message_id) == 1, "a held message was redelivered"
            for message in list(held):
                if message is not kept:
                    message.ack()
            time.sleep(0.5)  # sampling interval of the 25 s observation
        received_ids = {m.message_id for m in held}
        assert nacked.message_id in received_ids
        kept.ack()
    finally:
        future.cancel()
        future.result(timeout=30)
        subscriber.close()
    assert {m.data for m in held} == {f"m{i}".encode() for i in range(5)}


def test_a_missing_subscription_ends_the_future_with_not_found(
    pubsub_emulator: str, project_id: str
) -> None:
    subscriber = UnaryPullSubscriber()
    future = subscriber.subscribe(f"projects/{project_id}/subscriptions/absent", lambda m: None)
    try:
        with pytest.raises(gexc.NotFound):
            future.result(timeout=30)
    finally:
        subscriber.close()
