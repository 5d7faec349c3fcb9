"""THE BASELINE BEING COMPARED, not product code: the seeds' recipe, for bench/cost only.

"Check-then-set dedup + transactional counters", the naive design the toolkit replaces:

* ingress **gets** the dedup document of the message's key and, if absent, **sets** it (two
  operations, not atomic: two concurrent copies can both pass the get), then publishes to the
  final topic; an invalid message is published to the dead-letter topic;
* the consumer dedups a plain message the same way (get, then set, in its own namespace), and
  runs a FIFO message inside a Firestore **transaction** that reads the group's last-processed
  counter and writes ``last + 1``, per message; an early arrival (``seq > last + 1``) is
  **nacked** (no parking, no lease): Pub/Sub redelivers it, and each redelivery is another
  delivery and another transactional read.

Counted with the same wrappers as the library (bench/cost_counting), so the two are measured
alike. It is deliberately small and has the races the toolkit exists to remove; never use it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from google.cloud import firestore, pubsub_v1  # type: ignore[attr-defined]

from pubsub_toolkit.cloudevent import message_from_push_body
from pubsub_toolkit.message import Message, OutboundMessage
from pubsub_toolkit.producer.sink import MessageSink

DEDUP = "seeds_dedup"
COUNTERS = "seeds_fifo_counters"


def _doc_id(namespace: str, key: str) -> str:
    return hashlib.sha256(f"{namespace}\x00{key}".encode()).hexdigest()


def _invalid(attributes: dict[str, str]) -> str | None:
    """The seeds' validation: a number needs a group, a delay must be a non-negative number."""
    if "fifo_seq" in attributes and "fifo_group" not in attributes:
        return "fifo_seq_without_group"
    delay = attributes.get("delay_seconds")
    if delay is not None:
        try:
            if float(delay) < 0:
                return "invalid_delay_seconds"
        except ValueError:
            return "invalid_delay_seconds"
    return None


class SeedsIngress:
    """The seeds' ingress: check-then-set dedup on Firestore, then publish."""

    def __init__(
        self, client: firestore.Client, sink: MessageSink, final_topic: str, dead_topic: str
    ) -> None:
        self._dedup = client.collection(DEDUP)
        self._sink = sink
        self._final = final_topic
        self._dead = dead_topic

    def handle_push_body(self, body: bytes) -> str:
        """One push delivery: ``published``, ``duplicate`` or ``dead_lettered``."""
        message = message_from_push_body(body)
        attributes = dict(message.attributes)
        reason = _invalid(attributes)
        if reason is not None:
            attributes["error_reason"] = reason
            self._sink.publish(self._dead, OutboundMessage(message.data, attributes))
            return "dead_lettered"
        key = attributes.get("dedup_key") or message.message_id
        ref = self._dedup.document(_doc_id("ingress", key))
        if ref.get().exists:  # check ...
            return "duplicate"
        ref.set({"key": key, "seen_at": datetime.now(UTC)})  # ... then set: not atomic
        attributes["dedup_key"] = key
        group = attributes.get("fifo_group", "")
        self._sink.publish(self._final, OutboundMessage(message.data, attributes, group))
        return "published"


class SeedsConsumer:
    """The seeds' consumer: check-then-set dedup, a transactional counter per FIFO message."""

    def __init__(
        self, client: firestore.Client, consumer_id: str, handler: Callable[[Message], object]
    ) -> None:
        self._client = client
        self._dedup = client.collection(DEDUP)
        self._counters = client.collection(COUNTERS)
        self._consumer = consumer_id
        self._handler = handler

    def process(self, message: Message) -> str:
        """``processed``, ``duplicate`` (ack) or ``early`` (the caller nacks: redelivered)."""
        group = message.attributes.get("fifo_group")
        if group is None:
            key = message.attributes.get("dedup_key") or message.message_id
            ref = self._dedup.document(_doc_id(self._consumer, key))
            if ref.get().exists:
                return "duplicate"
            self._handler(message)
            ref.set({"key": key, "seen_at": datetime.now(UTC)})
            return "processed"
        seq = int(message.attributes["fifo_seq"])
        ref = self._counters.document(_doc_id(self._consumer, group))

        @firestore.transactional
        def advance(transaction: firestore.Transaction) -> str:
            snapshot = ref.get(transaction=transaction)
            last = int((snapshot.to_dict() or {}).get("last", 0)) if snapshot.exists else 0
            if seq <= last:
                return "duplicate"
            if seq > last + 1:
                return "early"
            self._handler(message)
            transaction.set(ref, {"last": seq})
            return "processed"

        outcome: str = advance(self._client.transaction())
        return outcome


def pull_and_process(
    subscriber: pubsub_v1.SubscriberClient,
    subscription: str,
    consumer: SeedsConsumer,
    on_outcome: Callable[[Message, str], None],
) -> int:
    """One unary pull: process each message, ack it, or nack an early one. Returns how many."""
    response = subscriber.pull(
        request={"subscription": subscription, "max_messages": 100, "return_immediately": True},
        timeout=10,
    )
    for received in response.received_messages:
        raw: Any = received.message
        message = Message(
            bytes(raw.data),
            dict(raw.attributes),
            message_id=raw.message_id,
            ordering_key=raw.ordering_key,
        )
        outcome = consumer.process(message)
        if outcome == "early":
            subscriber.modify_ack_deadline(
                request={
                    "subscription": subscription,
                    "ack_ids": [received.ack_id],
                    "ack_deadline_seconds": 0,
                }
            )
        else:
            subscriber.acknowledge(
                request={"subscription": subscription, "ack_ids": [received.ack_id]}
            )
        on_outcome(message, outcome)
    return len(response.received_messages)
