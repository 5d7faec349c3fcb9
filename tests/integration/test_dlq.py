"""Dead-letter listing and replay against the Pub/Sub emulator: what goes back when a replay
fails half-way, and FIFO numbers that are not numbers."""

from __future__ import annotations

import pytest
from google.cloud import pubsub_v1

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.message import Message
from pubsub_toolkit.producer.sink import PubSubSink
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from pubsub_toolkit_cli.cli.operations import PassedNumbers
from pubsub_toolkit_cli.dead_letters.listing import DeadLetter, list_dead_letters
from pubsub_toolkit_cli.dead_letters.replay import replay


def letter(**attributes: str) -> DeadLetter:
    return DeadLetter(Message(b"x", attributes), "r", "", None, "ack", "id")


def test_a_fifo_number_that_is_not_a_number_reads_as_none() -> None:
    assert letter(**{attr.FIFO_SEQ: "7"}).seq == 7
    assert letter(**{attr.FIFO_SEQ: "²"}).seq is None  # isdigit() but not int()-able
    assert letter(**{attr.FIFO_SEQ: "x"}).seq is None
    # Not canonical: ingress and the consumer refuse these, so they are not FIFO numbers here.
    for raw in ("01", "+1", "\u0661", str(2**63)):
        assert letter(**{attr.FIFO_SEQ: raw}).seq is None, raw


def test_letters_without_a_valid_fifo_number_are_always_replayed() -> None:
    # Decided before any store is read: no settings are needed for these.
    passed = PassedNumbers(consumer_id=None)
    assert not passed.check(letter(**{attr.FIFO_GROUP: "g", attr.FIFO_SEQ: "0"}))
    assert not passed.check(letter(**{attr.FIFO_GROUP: "g"}))
    assert not passed.check(letter())
    assert passed.notes == []


def test_a_replay_that_fails_while_selecting_puts_every_letter_back(
    pubsub_emulator: str, project_id: str, unique: str
) -> None:
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    topic = publisher.topic_path(project_id, f"dl-{unique}")
    origin = publisher.topic_path(project_id, f"origin-{unique}")
    subscription = subscriber.subscription_path(project_id, f"dls-{unique}")
    publisher.create_topic(name=topic)
    publisher.create_topic(name=origin)
    subscriber.create_subscription(name=subscription, topic=topic, ack_deadline_seconds=60)
    for n in range(3):
        publisher.publish(topic, b"x", **{attr.ERROR_REASON: "r", attr.DEDUP_KEY: f"k{n}"}).result()

    def select(_letter: DeadLetter) -> bool:
        raise RuntimeError("the FIFO store is unreachable")

    sink = PubSubSink()
    try:
        with pytest.raises(RuntimeError, match="unreachable"):
            replay(subscriber, subscription, sink, origin, store=MemoryDedupStore(), select=select)
        # Released at once, not held for the 60 s ack deadline.
        again = list_dead_letters(subscriber, subscription)
        assert sorted(d.dedup_key or "" for d in again) == ["k0", "k1", "k2"]
    finally:
        sink.close()
        subscriber.close()
