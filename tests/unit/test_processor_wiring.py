"""``MessageProcessor.from_settings`` wires the sync and the async processor from one
:class:`~pubsub_toolkit.consumer.processor_sync.Wiring` (issue 26: no hand-written async twin of
a decision), so the parts besides the stores cannot drift between the two.

They had: the async processor's dead letters were published without the ``send`` span the
sync one's get, so an async consumer's dead letter carried no trace context.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from pubsub_toolkit import tracing
from pubsub_toolkit.config import ConsumerSettings, Settings
from pubsub_toolkit.consumer.processor import MessageProcessor
from pubsub_toolkit.consumer.processor_async import AsyncMessageProcessor
from pubsub_toolkit.errors import PermanentError
from pubsub_toolkit.message import Message
from tests.support.sinks import RecordingSink
from tests.support.spans import memory_spans

DLQ = "projects/p/topics/dlq"
SETTINGS = Settings(
    project="p",
    final_topic="projects/p/topics/final",
    dead_letter_topic=DLQ,
    store_backend="memory",
    dedup_lease=timedelta(seconds=70),
)
CONSUMER = ConsumerSettings(consumer_id="orders", max_attempts=3)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    yield from memory_spans()


@pytest.fixture
def sink(monkeypatch: pytest.MonkeyPatch) -> RecordingSink:
    """Pub/Sub as from_settings' PubSubSink() would reach it."""
    recording = RecordingSink()
    monkeypatch.setattr("pubsub_toolkit.producer.sink.PubSubSink", lambda: recording)
    return recording


def sync_handler(message: Message) -> None:
    return None


async def async_handler(message: Message) -> None:
    return None


def reject(processor: object) -> None:
    error = PermanentError("invalid_payload", "not an order")
    message = Message(b"x", {"dedup_key": "k"}, message_id="m1")
    if isinstance(processor, AsyncMessageProcessor):
        asyncio.run(processor.reject(message, error))
    else:
        assert isinstance(processor, MessageProcessor)
        processor.reject(message, error)


@pytest.mark.parametrize("handler", [sync_handler, async_handler], ids=["sync", "async"])
def test_a_dead_letter_is_published_under_a_send_span_by_either_processor(
    handler: object, spans: InMemorySpanExporter, sink: RecordingSink
) -> None:
    processor = MessageProcessor.from_settings(SETTINGS, CONSUMER, handler)  # type: ignore[call-overload]
    reject(processor)
    [send] = spans.get_finished_spans()
    assert send.name == "send dlq" and send.kind is trace.SpanKind.PRODUCER
    assert (send.attributes or {})[tracing.HOP] == "consumer"
    [dead] = sink.on(DLQ)
    assert tracing.TRACEPARENT in dead.attributes


@pytest.mark.parametrize("handler", [sync_handler, async_handler], ids=["sync", "async"])
def test_both_processors_take_the_same_settings(handler: object, sink: RecordingSink) -> None:
    processor = MessageProcessor.from_settings(SETTINGS, CONSUMER, handler)  # type: ignore[call-overload]
    async_ = isinstance(processor, AsyncMessageProcessor)
    dedup = processor.dedup if async_ else processor._dedup
    assert processor._max_attempts == CONSUMER.max_attempts
    assert processor._scheduler is None  # no delay path configured
    assert dedup.namespace == "orders"
    assert dedup._lease == SETTINGS.dedup_lease
    assert dedup._ttl == SETTINGS.dedup_ttl
    assert processor.gate.policy.max_attempts == CONSUMER.max_attempts
