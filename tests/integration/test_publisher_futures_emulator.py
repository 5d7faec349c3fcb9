"""The Publisher's futures on the Pub/Sub emulator: google-cloud-pubsub's own future with the
message id, a failed publish as the future's exception, and FIFO numbers from 8 threads in one
group arriving unique, contiguous and in each thread's order."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from google.api_core import exceptions as gexc
from google.cloud import pubsub_v1  # type: ignore[attr-defined]
from google.cloud.pubsub_v1.publisher import futures as gfutures

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.message import OutboundMessage
from pubsub_toolkit.producer.publisher import Publisher
from pubsub_toolkit.producer.sink import PubSubSink
from pubsub_toolkit.stores.counters.redis import RedisSequenceCounter

TIMEOUT = 60.0  # seconds: a deadline for the emulator, never a measured duration


def topic_and_subscription(project_id: str) -> tuple[str, str]:
    topic = f"projects/{project_id}/topics/origin"
    subscription = f"projects/{project_id}/subscriptions/origin-sub"
    pubsub_v1.PublisherClient().create_topic(name=topic)
    with pubsub_v1.SubscriberClient() as subscriber:
        subscriber.create_subscription(name=subscription, topic=topic)
    return topic, subscription


def pull_all(subscription: str, count: int) -> list[pubsub_v1.types.PubsubMessage]:
    """Pull (and ack) until ``count`` messages arrived or the deadline passed."""
    got: dict[str, pubsub_v1.types.PubsubMessage] = {}
    deadline = time.monotonic() + TIMEOUT
    with pubsub_v1.SubscriberClient() as subscriber:
        while len(got) < count and time.monotonic() < deadline:
            response = subscriber.pull(
                subscription=subscription, max_messages=1000, timeout=TIMEOUT
            )
            for received in response.received_messages:
                got[received.message.message_id] = received.message
            if response.received_messages:
                subscriber.acknowledge(
                    subscription=subscription,
                    ack_ids=[r.ack_id for r in response.received_messages],
                )
    return list(got.values())


def test_the_future_is_the_clients_and_carries_the_message_id(
    pubsub_emulator: str, project_id: str
) -> None:
    topic, subscription = topic_and_subscription(project_id)
    sink = PubSubSink()
    try:
        future = Publisher(sink, topic).publish(b"hello", {"kind": "greeting"}, dedup_key="k1")
        assert isinstance(future, gfutures.Future)
        message_id = future.result(timeout=TIMEOUT)
    finally:
        sink.close()
    [message] = pull_all(subscription, 1)
    assert message.message_id == message_id
    assert dict(message.attributes) == {"kind": "greeting", attr.DEDUP_KEY: "k1"}


def test_a_missing_topic_is_the_futures_exception_and_a_fifo_gap_is_logged(
    pubsub_emulator: str, project_id: str, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    missing = f"projects/{project_id}/topics/never-created"
    counter = RedisSequenceCounter.from_url(redis_url, prefix=f"{project_id}:")
    sink = PubSubSink()
    try:
        publisher = Publisher(sink, missing, counter)
        with pytest.raises(gexc.NotFound):
            publisher.publish(b"x").result(timeout=TIMEOUT)
        with caplog.at_level(logging.WARNING):
            future = publisher.publish(b"x", fifo_group="g")
            assert isinstance(future.exception(timeout=TIMEOUT), gexc.NotFound)
    finally:
        sink.close()
    assert "fifo_seq 1 in group 'g' failed" in caplog.text
    assert counter.current("g") == 1  # the number is spent: a gap the gate's timeout handles


def close_within(sink: PubSubSink, timeout: float) -> None:
    """Close ``sink`` from a helper thread: a client whose commit thread is stuck never stops,
    and the test must fail rather than hang."""
    closer = threading.Thread(target=sink.close, daemon=True)
    closer.start()
    closer.join(timeout)
    assert not closer.is_alive(), "the client could not stop: its commit thread is stuck"


def test_a_failed_ordering_key_with_batches_queued_settles_them_all_and_resumes(
    pubsub_emulator: str, project_id: str
) -> None:
    # The first batch fails (no topic); the client pauses the key and cancels the batches
    # queued behind it, settling their futures inside its own locks. A resume called from a
    # future's callback there waited for those locks for ever: the commit thread, and with it
    # every later publish of the client, stuck.
    topic = f"projects/{project_id}/topics/created-late"
    sink = PubSubSink()
    try:
        futures = [
            sink.publish_future(topic, OutboundMessage(b"x", {}, ordering_key="k"))
            for _ in range(350)
        ]
        for future in futures:
            assert future.exception(timeout=TIMEOUT) is not None
        pubsub_v1.PublisherClient().create_topic(name=topic)
        # The key was paused by the failure; the sink resumes it, so the next message goes out.
        after = sink.publish_future(topic, OutboundMessage(b"y", {}, ordering_key="k"))
        assert after.result(timeout=TIMEOUT)
    finally:
        close_within(sink, TIMEOUT)


def test_a_fifo_group_whose_publishes_failed_is_resumed_for_its_next_message(
    pubsub_emulator: str, project_id: str, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The Publisher hands a group's waiting messages over in one run (several of the client's
    # batches): all fail, each a logged gap; the paused key is resumed for the next message.
    topic = f"projects/{project_id}/topics/created-late"
    counter = RedisSequenceCounter.from_url(redis_url, prefix=f"{project_id}:")
    sink = PubSubSink()
    try:
        publisher = Publisher(sink, topic, counter)
        with caplog.at_level(logging.WARNING):
            futures = [publisher.publish(b"x", fifo_group="g") for _ in range(350)]
            for future in futures:
                assert future.exception(timeout=TIMEOUT) is not None
        assert sum("stays unused" in r.getMessage() for r in caplog.records) == 350
        pubsub_v1.PublisherClient().create_topic(name=topic)
        assert publisher.publish(b"y", fifo_group="g").result(timeout=TIMEOUT)
    finally:
        close_within(sink, TIMEOUT)


def test_eight_threads_in_one_group_reach_pubsub_numbered_in_order(
    pubsub_emulator: str, project_id: str, redis_url: str
) -> None:
    topic, subscription = topic_and_subscription(project_id)
    counter = RedisSequenceCounter.from_url(redis_url, prefix=f"{project_id}:")
    sink, per_thread, start = PubSubSink(), 50, threading.Barrier(8)
    publisher = Publisher(sink, topic, counter)
    ids: dict[str, str] = {}

    def produce(t: int) -> None:
        start.wait(TIMEOUT)
        futures = {
            f"{t}-{i}": publisher.publish(f"{t}-{i}".encode(), fifo_group="g", dedup_key=f"{t}-{i}")
            for i in range(per_thread)
        }
        ids.update({key: f.result(timeout=TIMEOUT) for key, f in futures.items()})

    threads = [threading.Thread(target=produce, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
    sink.close()
    assert len(ids) == 8 * per_thread
    messages = pull_all(subscription, 8 * per_thread)
    seq = {m.attributes[attr.DEDUP_KEY]: int(m.attributes[attr.FIFO_SEQ]) for m in messages}
    assert sorted(seq.values()) == list(range(1, 8 * per_thread + 1))  # unique, contiguous
    for t in range(8):
        mine = [seq[f"{t}-{i}"] for i in range(per_thread)]
        assert mine == sorted(mine), f"thread {t}'s messages were numbered out of its order"
    # Pub/Sub accepted the group's messages in number order (the emulator's ids ascend).
    accepted = sorted(messages, key=lambda m: int(m.message_id))
    assert [int(m.attributes[attr.FIFO_SEQ]) for m in accepted] == sorted(seq.values())
