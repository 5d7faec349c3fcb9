"""The toolkit's trace continues one google-cloud-pubsub's own tracing started, on the emulator.

A producer that turned on the client's OpenTelemetry tracing (``enable_open_telemetry_tracing``)
publishes with ``googclient_traceparent``; ingress must accept that attribute (not a reserved
``goog*`` name), join that trace, and hand it on in what it publishes to the final topic.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from google.cloud import pubsub_v1  # type: ignore[attr-defined]
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from pubsub_toolkit import tracing
from pubsub_toolkit.core.ingress import IngressOutcome
from pubsub_toolkit.ingress.pipeline import Ingress
from pubsub_toolkit.message import Message
from pubsub_toolkit.producer.sink import PubSubSink
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from tests.support.spans import memory_spans


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    yield from memory_spans()


def pull_one(subscriber: pubsub_v1.SubscriberClient, subscription: str) -> Message:
    for _ in range(50):  # bounded: the emulator hands a pull its message within a few polls
        response = subscriber.pull(subscription=subscription, max_messages=1, timeout=10)
        if response.received_messages:
            received = response.received_messages[0]
            subscriber.acknowledge(subscription=subscription, ack_ids=[received.ack_id])
            m = received.message
            return Message(m.data, dict(m.attributes), m.message_id)
    raise AssertionError(f"nothing arrived on {subscription}")


def test_ingress_continues_the_trace_the_clients_own_tracing_started(
    pubsub_emulator: str, project_id: str, spans: InMemorySpanExporter
) -> None:
    traced_client = pubsub_v1.PublisherClient(
        publisher_options=pubsub_v1.types.PublisherOptions(enable_open_telemetry_tracing=True)
    )
    plain = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    topics = {n: f"projects/{project_id}/topics/{n}" for n in ("origin", "final", "dlq")}
    for topic in topics.values():
        plain.create_topic(name=topic)
    subs = {n: f"projects/{project_id}/subscriptions/{n}-sub" for n in ("origin", "final")}
    for name, sub in subs.items():
        subscriber.create_subscription(name=sub, topic=topics[name])

    traced_client.publish(topics["origin"], b"order 1", dedup_key="k1").result(timeout=30)
    delivered = pull_one(subscriber, subs["origin"])
    assert tracing.TRACEPARENT in delivered.attributes  # the client's tracing set it

    ingress = Ingress(
        store=MemoryDedupStore(),
        sink=PubSubSink(plain),
        final_topic=topics["final"],
        dead_letter_topic=topics["dlq"],
        lease=timedelta(seconds=30),
        ttl=timedelta(hours=1),
    )
    assert ingress.handle(delivered).outcome is IngressOutcome.PUBLISHED
    forwarded = pull_one(subscriber, subs["final"])

    finished = list(spans.get_finished_spans())
    [create] = [s for s in finished if s.name == "origin create"]  # the client's own span
    [process] = [s for s in finished if s.name == "process origin"]
    assert process.context.trace_id == create.context.trace_id
    assert process.parent is not None and process.parent.span_id == create.context.span_id
    # What reaches the final topic carries ingress's process span on, in the same trace.
    trace_id, span_id = forwarded.attributes[tracing.TRACEPARENT].split("-")[1:3]
    assert (int(trace_id, 16), int(span_id, 16)) == (
        process.context.trace_id,
        process.context.span_id,
    )
