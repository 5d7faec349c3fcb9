"""The pipeline's topics and subscriptions on the emulator, and a pull-and-ack drain.

The same topology the Terraform module creates: origin, final and dead-letter topics; a pull
subscription on final and on dead-letter; and a push subscription from origin to the ingress
function with Terraform's dead-letter policy (terraform/push.tf): a message ingress keeps
refusing - one whose own dead-letter copy cannot be published, say - ends on the dead-letter
topic after ``max_delivery_attempts`` pushes instead of being pushed for ever. Terraform's
consumer push subscription has no local counterpart: locally the consumer is the user's own,
on ``final-sub``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from google.cloud import pubsub_v1  # type: ignore[attr-defined]

from pubsub_toolkit.message import Message
from pubsub_toolkit_cli.emulator import subscriber_client

# Pub/Sub's most. Terraform deploys push_max_delivery_attempts = 10 (terraform/variables.tf)
# with a 10-600 s retry backoff: tens of minutes before a message is dead-lettered. The emulator
# pushes again about once a second, so locally 10 pushes would dead-letter a message after a
# 10-second restart of a store; 100 give it a minute and a half or more (a test keeps this at
# least Terraform's).
PUSH_MAX_DELIVERY_ATTEMPTS = 100


@dataclass(frozen=True)
class Topology:
    """Full resource names of one project's pipeline."""

    project: str
    origin: str
    final: str
    dead_letter: str
    final_sub: str
    dead_letter_sub: str
    ingress_push_sub: str

    @classmethod
    def for_project(cls, project: str) -> Topology:
        topic = f"projects/{project}/topics/"
        sub = f"projects/{project}/subscriptions/"
        return cls(
            project=project,
            origin=topic + "origin",
            final=topic + "final",
            dead_letter=topic + "dead-letter",
            final_sub=sub + "final-sub",
            dead_letter_sub=sub + "dead-letter-sub",
            ingress_push_sub=sub + "origin-to-ingress",
        )


def create_topology(
    project: str,
    *,
    ingress_url: str | None = None,
    push_max_delivery_attempts: int = PUSH_MAX_DELIVERY_ATTEMPTS,
) -> Topology:
    """Create the topics and subscriptions; push origin to ``ingress_url`` when given, with a
    dead-letter policy of ``push_max_delivery_attempts`` (5-100) to the dead-letter topic."""
    topo = Topology.for_project(project)
    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    try:
        for topic in (topo.origin, topo.final, topo.dead_letter):
            publisher.create_topic(name=topic, timeout=10)
        for name, topic in ((topo.final_sub, topo.final), (topo.dead_letter_sub, topo.dead_letter)):
            subscriber.create_subscription(
                name=name, topic=topic, ack_deadline_seconds=60, timeout=10
            )
        if ingress_url is not None:
            # The path names the topic in access logs; the function reads only the body.
            endpoint = f"{ingress_url.rstrip('/')}/projects/{project}/topics/origin"
            subscriber.create_subscription(
                request=pubsub_v1.types.Subscription(
                    name=topo.ingress_push_sub,
                    topic=topo.origin,
                    push_config=pubsub_v1.types.PushConfig(push_endpoint=endpoint),
                    ack_deadline_seconds=30,
                    # As deployed: ingress answers 500 for what it cannot even dead-letter
                    # itself, and relies on this policy to end the redeliveries.
                    dead_letter_policy=pubsub_v1.types.DeadLetterPolicy(
                        dead_letter_topic=topo.dead_letter,
                        max_delivery_attempts=push_max_delivery_attempts,
                    ),
                ),
                timeout=10,
            )
    finally:
        subscriber.close()
    return topo


def drain(
    subscription: str, *, expected: int, timeout: float = 60.0, quiet: float = 2.0
) -> list[Message]:
    """Pull and ack until ``expected`` messages arrived and then ``quiet`` seconds pass idle.

    Waiting for a quiet period after reaching ``expected`` is what lets a caller see an extra,
    duplicated message instead of stopping just before it arrives.
    """
    subscriber = subscriber_client()  # messages can be 10 MB
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
                        publish_time=m.publish_time,
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
