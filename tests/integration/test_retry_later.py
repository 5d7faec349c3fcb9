"""RetryLater on the real delay path: the consumer's processor schedules the retry on the Cloud
Tasks emulator, which calls the relay (gunicorn, OIDC), which publishes to the Pub/Sub
emulator's final topic; Firestore emulator for the dedup records (issue 14, item 5).

A 2-s delay is waited for (on a condition with a deadline); a 2-h one goes through the same
code and its task is checked on the emulator (schedule time = now + 2 h).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from google.cloud import firestore, pubsub_v1

from pubsub_toolkit import Consumer, ConsumerSettings, Settings
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.consumer.processor import MessageProcessor
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor
from pubsub_toolkit.delay.scheduler import CloudTasksScheduler, HttpTarget, task_id
from pubsub_toolkit.errors import RetryLater
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.stores.dedup.firestore import FirestoreDedupStore
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from pubsub_toolkit_local.topology import drain
from tests.support.pipeline import DelayChain, delay_chain
from tests.support.sinks import RecordingSink
from tests.support.waiting import wait_until

pytestmark = pytest.mark.usefixtures("pubsub_emulator", "firestore_emulator")


@pytest.fixture
def chain(project_id: str, tmp_path: Path) -> Iterator[DelayChain]:
    with delay_chain(project_id, tmp_path) as running:
        yield running


def processor(chain: DelayChain, project_id: str, handler: object) -> MessageProcessor:
    env = chain.env
    scheduler = CloudTasksScheduler(
        chain.client(),
        queue=chain.queue,
        target=HttpTarget(
            env["PUBSUB_TOOLKIT_RELAY_URL"] + "/release",
            env["PUBSUB_TOOLKIT_TASKS_SERVICE_ACCOUNT"],
            env["PUBSUB_TOOLKIT_RELAY_URL"],
        ),
    )
    dedup = IdempotentProcessor(
        FirestoreDedupStore(firestore.Client(project=project_id)),
        namespace="consumer-a",
        lease=timedelta(minutes=1),
        ttl=timedelta(days=8),
    )
    gate = FifoGate(MemoryFifoStore(), consumer="consumer-a", handler=handler)  # type: ignore[arg-type]
    log = DecisionLog("consumer-a")
    return MessageProcessor(
        handler=handler,  # type: ignore[arg-type]
        dedup=dedup,
        gate=gate,
        dead_letters=DeadLetterer(RecordingSink(), "projects/p/topics/dlq", log),
        scheduler=scheduler,
    )


def test_retry_later_is_acked_now_and_delivered_again_after_the_delay(
    chain: DelayChain, project_id: str
) -> None:
    runs: list[tuple[float, Message]] = []

    def handler(message: Message) -> None:
        runs.append((time.time(), message))
        if len(runs) == 1:
            raise RetryLater(timedelta(seconds=2), "not ready")

    consumer = processor(chain, project_id, handler)
    pubsub_v1.PublisherClient().publish(
        chain.topology.final, b"order", dedup_key="order-1", color="blue"
    ).result(timeout=10)
    [first] = drain(chain.topology.final_sub, expected=1, timeout=30, quiet=0)
    assert consumer.process(first) == "retry_scheduled"  # acked (drain acked it) at once
    asked = time.time()
    [again] = drain(chain.topology.final_sub, expected=1, timeout=30, quiet=1)
    arrived = time.time()
    assert arrived - asked >= 2.0, "delivered again before the delay"
    assert again.attributes["dedup_key"] == "order-1" and again.attributes["color"] == "blue"
    assert (again.attributes["retry_attempt"], again.attributes["retry_consumer"]) == (
        "2",
        "consumer-a",
    )
    assert again.data == b"order"
    assert consumer.process(again) == "processed"
    assert len(runs) == 2
    assert consumer.process(again) == "duplicate"


def test_a_two_hour_retry_is_a_task_due_in_two_hours(chain: DelayChain, project_id: str) -> None:
    def handler(message: Message) -> None:
        raise RetryLater(timedelta(hours=2))

    consumer = processor(chain, project_id, handler)
    asked = datetime.now(UTC)
    message = Message(b"order", {"dedup_key": "order-2"}, message_id="m1")
    assert consumer.process(message) == "retry_scheduled"
    name = f"{chain.queue}/tasks/{task_id('order-2#retry:consumer-a:2')}"
    task = chain.client().get_task(name=name)
    due = task.schedule_time - asked
    assert timedelta(hours=2) <= due < timedelta(hours=2, seconds=30)
    assert drain(chain.topology.final_sub, expected=0, quiet=1) == []  # nothing released yet


def test_fifo_retry_later_holds_the_groups_place_on_the_real_consumer(
    pubsub_emulator: str, redis_url: str, project_id: str
) -> None:
    """The Consumer on the Pub/Sub emulator with the Redis store: the head raises
    RetryLater(1.5 s) once; its successors, published at once, wait for it and run after it,
    in order, and nothing reaches the dead-letter topic. The same code path as a two-hour
    delay (the gate parks the head until now + delay; unit-tested with a manual clock)."""
    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    topic = publisher.create_topic(name=f"projects/{project_id}/topics/final").name
    publisher.create_topic(name=f"projects/{project_id}/topics/dead-letter")
    subscription = f"projects/{project_id}/subscriptions/final-sub"
    subscriber.create_subscription(name=subscription, topic=topic, ack_deadline_seconds=30)
    subscriber.close()
    ran: list[tuple[str, float]] = []
    retried: list[float] = []

    def handle(message: Any) -> None:
        if message.data == b"1" and not retried:
            retried.append(time.monotonic())
            raise RetryLater(timedelta(seconds=1.5), reason="the warehouse is closed")
        ran.append((message.data.decode(), time.monotonic()))

    settings = Settings(
        project=project_id,
        final_topic="final",
        dead_letter_topic="dead-letter",
        store_backend="redis",
        redis_url=redis_url,
    )
    consumer = ConsumerSettings(consumer_id=f"retry-{project_id}")
    processor = MessageProcessor.from_settings(settings, consumer, handle)
    for seq in (1, 2, 3):
        publisher.publish(
            topic, str(seq).encode(), fifo_group="g", fifo_seq=str(seq), dedup_key=f"g-{seq}"
        ).result(timeout=10)
    with Consumer(subscription, processor, concurrency=4):
        wait_until(lambda: len(ran) == 3, timeout=60, what="the group to finish")
    assert [step for step, _ in ran] == ["1", "2", "3"]  # 2 and 3 waited for 1
    assert ran[0][1] - retried[0] >= 1.5  # not before its delay
