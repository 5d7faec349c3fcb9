"""Pub/Sub helpers for tests, using the official client against the emulator."""

from __future__ import annotations

import time
from dataclasses import dataclass

from google.cloud import pubsub_v1

from pubsub_toolkit.message import Message


@dataclass(frozen=True)
class Topology:
    """Topics and pull subscriptions of one test project."""

    project: str
    origin: str
    final: str
    dead_letter: str
    final_sub: str
    dead_letter_sub: str


def create_topology(project: str) -> Topology:
    """origin, final and dead-letter topics, with pull subscriptions on final and dead-letter."""
    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    topo = Topology(
        project=project,
        origin=f"projects/{project}/topics/origin",
        final=f"projects/{project}/topics/final",
        dead_letter=f"projects/{project}/topics/dead-letter",
        final_sub=f"projects/{project}/subscriptions/final-check",
        dead_letter_sub=f"projects/{project}/subscriptions/dead-letter-check",
    )
    for topic in (topo.origin, topo.final, topo.dead_letter):
        publisher.create_topic(name=topic, timeout=10)
    subscriber.create_subscription(
        name=topo.final_sub, topic=topo.final, ack_deadline_seconds=60, timeout=10
    )
    subscriber.create_subscription(
        name=topo.dead_letter_sub, topic=topo.dead_letter, ack_deadline_seconds=60, timeout=10
    )
    subscriber.close()
    return topo


def drain(
    subscription: str, *, expected: int, timeout: float = 60.0, quiet: float = 2.0
) -> list[Message]:
    """Pull and ack until ``expected`` messages arrived and then ``quiet`` seconds pass idle.

    Waiting for a quiet period after reaching ``expected`` is what lets a test see an extra,
    duplicated message instead of stopping just before it arrives.
    """
    subscriber = pubsub_v1.SubscriberClient()
    received: list[Message] = []
    deadline = time.monotonic() + timeout
    last_arrival = time.monotonic()
    try:
        while time.monotonic() < deadline:
            if len(received) >= expected and time.monotonic() - last_arrival >= quiet:
                break
            response = subscriber.pull(
                subscription=subscription, max_messages=1000, timeout=5, return_immediately=True
            )
            if not response.received_messages:
                time.sleep(0.1)  # the emulator answers an empty pull at once; don't spin
                continue
            last_arrival = time.monotonic()
            for item in response.received_messages:
                m = item.message
                received.append(
                    Message(
                        data=m.data,
                        attributes=dict(m.attributes),
                        message_id=m.message_id,
                        ordering_key=m.ordering_key,
                    )
                )
            subscriber.acknowledge(
                subscription=subscription,
                ack_ids=[item.ack_id for item in response.received_messages],
                timeout=10,
            )
    finally:
        subscriber.close()
    return received
