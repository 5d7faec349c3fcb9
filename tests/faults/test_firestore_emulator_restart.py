"""The Firestore emulator (the dedup and FIFO store) stops mid-stream and comes back.

A streaming-pull :class:`Consumer` on the session's Pub/Sub emulator keeps its dedup records and
FIFO gate state in a Firestore emulator of the test's own. While that Firestore is stopped:

* every store call fails closed (StoreUnavailableError, a TransientError) within the bounded
  retry, so the consumer **nacks** and Pub/Sub redelivers - no handler runs without its record,
  nothing is acked unprocessed;

once it is started again on the same port (empty - the emulator keeps nothing), the redeliveries
are processed: **every message exactly once, the FIFO group in order, nothing dead-lettered**.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import timedelta

import pytest
from google.cloud import firestore, pubsub_v1

from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.consumer.processor import MessageProcessor
from pubsub_toolkit.consumer.subscriber import Consumer
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.stores.dedup.firestore import FirestoreDedupStore
from pubsub_toolkit.stores.fifo_state.firestore import FirestoreFifoStore
from tests.support.restartable import Restartable
from tests.support.sinks import RecordingSink
from tests.support.waiting import wait_until


def test_store_outage_nacks_then_every_message_is_processed_once_in_order(
    pubsub_emulator: str,
    own_firestore: Restartable,
    project_id: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    topic = publisher.create_topic(name=f"projects/{project_id}/topics/final").name
    subscription = subscriber.create_subscription(
        name=f"projects/{project_id}/subscriptions/final-sub", topic=topic, ack_deadline_seconds=10
    ).name
    subscriber.close()
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", own_firestore.host)  # read by the constructor
    client = firestore.Client(project=project_id)
    monkeypatch.undo()

    handled: list[str] = []
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()

    def handler(message: Message) -> None:
        with lock:
            handled.append(message.attributes["dedup_key"])

    def on_outcome(_message: Message, outcome: str) -> None:
        with lock:
            outcomes[outcome] += 1

    dead_sink = RecordingSink()
    log = DecisionLog("fs-consumer")
    processor = MessageProcessor(
        handler=handler,
        dedup=IdempotentProcessor(
            FirestoreDedupStore(client),
            namespace="fs-consumer",
            lease=timedelta(seconds=30),
            ttl=timedelta(hours=1),
        ),
        gate=FifoGate(
            FirestoreFifoStore(client),
            consumer="fs-consumer",
            handler=handler,
            dead_letters=DeadLetterer(dead_sink, "projects/p/topics/dlq", log),
            log=log,
        ),
    )

    def publish(key: str, **extra: str) -> None:
        publisher.publish(topic, key.encode(), dedup_key=key, **extra).result(timeout=10)

    def count() -> int:
        with lock:
            return len(handled)

    with Consumer(subscription, processor, concurrency=4, on_outcome=on_outcome) as consumer:
        publish("warm-up")
        # Wait for the outcome, not the handler: the handler runs before the record is "done".
        wait_until(lambda: outcomes["processed"] == 1, timeout=30, what="the warm-up message")

        own_firestore.stop()
        keys = [f"k{i}" for i in range(12)]
        for key in keys:
            publish(key)
        for seq in range(1, 6):
            publish(f"h#{seq}", fifo_group="h", fifo_seq=str(seq))
        # Each store call gives up after its bounded retry; the delivery is nacked.
        wait_until(lambda: outcomes["retry"] >= 1, timeout=60, what="nacks during the outage")
        t_restart = time.monotonic()
        assert count() == 1, "a handler ran while its store was unreachable"
        own_firestore.start()

        wait_until(lambda: count() >= 1 + 12 + 5, timeout=120, what="every message after recovery")
        assert consumer.stream_error() is None
        print(f"recovered {time.monotonic() - t_restart:.1f}s after the restart")

    with lock:
        counts = Counter(handled)
        order = [int(k.split("#")[1]) for k in handled if k.startswith("h#")]
    assert set(counts) == {"warm-up", *keys, *(f"h#{s}" for s in range(1, 6))}
    assert set(counts.values()) == {1}, {k: n for k, n in counts.items() if n > 1}
    assert order == [1, 2, 3, 4, 5]
    assert dead_sink.published == {}
    publisher.stop()
