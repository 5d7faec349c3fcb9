"""The Consumer on a subscription with exactly-once delivery (issue 27, item 9).

With exactly-once on, Pub/Sub confirms each ack, and an ack it refuses means the message comes
again. The Consumer acks with ``ack_with_response`` and logs a refusal at WARNING (a plain
``ack()`` drops it silently). The emulator supports exactly-once acks: a Consumer on such a
subscription handles each message once, every ack is confirmed, nothing is delivered again.
The refusal itself cannot be provoked on demand through the emulator (the client extends every
lease), so the second test drives google-cloud-pubsub's own ``Message`` class with its request
queue and answers its ack request with the client's ``AcknowledgeError``, as the client's
dispatcher does when Pub/Sub refuses an ack.
"""

from __future__ import annotations

import logging
import queue
import threading
from datetime import timedelta

import pytest
from google.cloud import pubsub_v1
from google.cloud.pubsub_v1.subscriber import exceptions as sub_exceptions
from google.cloud.pubsub_v1.subscriber.message import Message as ReceivedMessage
from google.pubsub_v1 import types as gapic_types

from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.consumer.processor import MessageProcessor
from pubsub_toolkit.consumer.subscriber import Consumer, settle
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.support.waiting import wait_until

TTL = timedelta(hours=1)


def test_a_consumer_on_an_exactly_once_subscription_handles_each_message_once(
    pubsub_emulator: str, project_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    topic = f"projects/{project_id}/topics/eod"
    subscription = f"projects/{project_id}/subscriptions/eod-sub"
    publisher = pubsub_v1.PublisherClient()
    publisher.create_topic(name=topic)
    admin = pubsub_v1.SubscriberClient()
    admin.create_subscription(
        request={
            "name": subscription,
            "topic": topic,
            "ack_deadline_seconds": 10,
            "enable_exactly_once_delivery": True,
        }
    )
    assert admin.get_subscription(subscription=subscription).enable_exactly_once_delivery
    handled: list[str] = []
    lock = threading.Lock()

    def handler(message: Message) -> None:
        with lock:
            handled.append(message.data.decode())

    dedup = IdempotentProcessor(MemoryDedupStore(), namespace="eod", lease=TTL, ttl=TTL)
    gate = FifoGate(MemoryFifoStore(), consumer="eod", handler=handler)
    processor = MessageProcessor(handler=handler, dedup=dedup, gate=gate)
    outcomes: list[str] = []
    caplog.set_level(logging.WARNING, logger="pubsub_toolkit")
    consumer = Consumer(
        subscription, processor, on_outcome=lambda m, outcome: outcomes.append(outcome)
    )
    with consumer:
        for n in range(20):
            publisher.publish(topic, f"m{n}".encode(), dedup_key=f"k{n}").result(timeout=30)
        wait_until(lambda: len(outcomes) >= 20, timeout=60, what="20 messages settled")
    assert sorted(handled) == sorted(f"m{n}" for n in range(20))
    assert outcomes == ["processed"] * 20
    refused = [r for r in caplog.records if "refused the ack" in r.getMessage()]
    assert refused == []
    # Every ack was confirmed: nothing is left to deliver again.
    left = admin.pull(subscription=subscription, max_messages=10, return_immediately=True)
    assert list(left.received_messages) == []
    admin.close()


def _received(requests: queue.Queue[object]) -> ReceivedMessage:
    pubsub_message = gapic_types.PubsubMessage(data=b"x", message_id="42")
    return ReceivedMessage(
        pubsub_message._pb,
        ack_id="ack-42",
        delivery_attempt=1,
        request_queue=requests,
        exactly_once_delivery_enabled_func=lambda: True,
    )


def test_an_ack_pubsub_refuses_is_logged_not_dropped(caplog: pytest.LogCaptureFixture) -> None:
    requests: queue.Queue[object] = queue.Queue()
    received = _received(requests)
    caplog.set_level(logging.WARNING, logger="pubsub_toolkit")
    outcome = settle("projects/p/subscriptions/s", received, Message(b"x", {}, "42"))
    assert outcome == "ack"
    request = requests.get_nowait()
    future = request.future  # type: ignore[attr-defined]
    assert future is not None, "the Consumer must ask for the ack's confirmation"
    future.set_exception(
        sub_exceptions.AcknowledgeError(
            sub_exceptions.AcknowledgeStatus.INVALID_ACK_ID, "ack id expired"
        )
    )
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("refused the ack of 42" in w and "duplicate" in w for w in warnings), warnings


def test_a_confirmed_ack_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    requests: queue.Queue[object] = queue.Queue()
    caplog.set_level(logging.WARNING, logger="pubsub_toolkit")
    settle("projects/p/subscriptions/s", _received(requests), Message(b"x", {}, "42"))
    request = requests.get_nowait()
    request.future.set_result(sub_exceptions.AcknowledgeStatus.SUCCESS)  # type: ignore[attr-defined]
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
