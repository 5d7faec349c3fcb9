"""One trace per message across every hop, read from an in-memory span exporter.

A delayed FIFO message goes the whole way in-process on our own protocols (a recording sink
stands for Pub/Sub, a recording scheduler for Cloud Tasks, the task body passed to the relay
as Cloud Tasks would): producer -> ingress -> task -> relay -> final -> consumer. The spans must
form one trace in causal order with the messaging conventions' attributes; a duplicate's span
carries the dedup decision; the decision log lines carry the trace id.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from pubsub_toolkit import attributes as attr
from pubsub_toolkit import tracing
from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.consumer.processor import MessageProcessor
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor
from pubsub_toolkit.delay.payload import DelayedMessage
from pubsub_toolkit.delay.relay import Relay
from pubsub_toolkit.ingress.pipeline import Ingress
from pubsub_toolkit.message import Message, OutboundMessage
from pubsub_toolkit.observability import CloudLoggingFormatter
from pubsub_toolkit.producer.publisher import Publisher
from pubsub_toolkit.stores.counters.memory import MemorySequenceCounter
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.support.sinks import RecordingSink
from tests.support.spans import memory_spans

ORIGIN, FINAL, DLQ = "projects/p/topics/origin", "projects/p/topics/final", "projects/p/topics/dlq"
QUEUE = "projects/p/locations/l/queues/delays"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    yield from memory_spans()


class RecordingScheduler:
    """Cloud Tasks as our Scheduler protocol sees it: keeps each task's body."""

    queue = QUEUE

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def schedule(
        self, message: OutboundMessage, deliver_at: datetime, dedup_key: str, hop: int = 0
    ) -> str:
        self.bodies.append(DelayedMessage(message, dedup_key, deliver_at, hop).to_json())
        return f"{QUEUE}/tasks/{len(self.bodies)}"


def delivered(message: OutboundMessage, message_id: str) -> Message:
    """What a subscriber receives for a published message."""
    return Message(message.data, message.attributes, message_id, ordering_key=message.ordering_key)


class Pipeline:
    """The whole path in one process, each part as deployed, on recording transports."""

    def __init__(self) -> None:
        self.clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
        self.sink = RecordingSink()
        self.scheduler = RecordingScheduler()
        store = MemoryDedupStore(self.clock)
        common: dict[str, Any] = {
            "store": store,
            "sink": self.sink,
            "final_topic": FINAL,
            "dead_letter_topic": DLQ,
            "lease": timedelta(seconds=30),
            "ttl": timedelta(days=8),
            "clock": self.clock,
        }
        self.ingress = Ingress(scheduler=self.scheduler, **common)
        self.relay = Relay(scheduler=self.scheduler, **common)
        self.handled: list[Message] = []
        gate = FifoGate(
            MemoryFifoStore(), consumer="orders", handler=self.handled.append, clock=self.clock
        )
        dedup = IdempotentProcessor(
            MemoryDedupStore(self.clock),
            namespace="orders",
            lease=timedelta(seconds=30),
            ttl=timedelta(days=8),
            clock=self.clock,
        )
        self.consumer = MessageProcessor(handler=self.handled.append, dedup=dedup, gate=gate)
        self.publisher = Publisher(self.sink, ORIGIN, MemorySequenceCounter())

    def origin(self, index: int = -1) -> Message:
        return delivered(self.sink.on(ORIGIN)[index], f"o{index}")


def by_name(spans: list[ReadableSpan]) -> dict[str, ReadableSpan]:
    return {span.name: span for span in spans}


def ids(span: ReadableSpan) -> tuple[int, int]:
    return span.context.trace_id, span.context.span_id


def carried_span(message: OutboundMessage) -> tuple[int, int]:
    """The (trace id, span id) a published message carries on."""
    trace_id, span_id = message.attributes[tracing.TRACEPARENT].split("-")[1:3]
    return int(trace_id, 16), int(span_id, 16)


def test_a_delayed_fifo_message_is_one_trace_across_every_hop(
    spans: InMemorySpanExporter,
) -> None:
    p = Pipeline()
    due = p.clock.now() + timedelta(minutes=5)
    p.publisher.publish(b"order 1", dedup_key="k1", fifo_group="g", deliver_at=due)
    p.ingress.handle(p.origin())
    p.clock.advance(timedelta(minutes=5))
    [task] = p.scheduler.bodies
    p.relay.release(task)
    p.consumer.process(delivered(p.sink.on(FINAL)[0], "f1"))
    assert [m.data for m in p.handled] == [b"order 1"]

    finished = list(spans.get_finished_spans())
    named = by_name(finished)
    assert set(named) == {
        "send origin",  # the producer's publish
        "process origin",  # ingress
        "create delays",  # the Cloud Tasks task
        "process delays",  # the relay's release, which publishes under it
        "process orders",  # the consumer
    }
    assert len({span.context.trace_id for span in finished}) == 1  # one trace
    # Causal order: each hop is the child of the one that sent it the message.
    chain = ["send origin", "process origin", "create delays", "process delays"]
    for parent, child in zip(chain, [*chain[1:], "process orders"], strict=False):
        assert named[child].parent is not None
        assert named[child].parent.span_id == named[parent].context.span_id, child
    # The release links to its scheduling.
    linked = {link.context.span_id for link in named["process delays"].links}
    assert named["create delays"].context.span_id in linked
    # The conventions' attributes.
    for span in finished:
        assert span.attributes is not None
        assert span.attributes["messaging.system"] == "gcp_pubsub"
        assert span.attributes[tracing.DEDUP_KEY] == "k1"
        assert span.attributes[tracing.FIFO_GROUP] == "g"
    kinds = {name: span.kind for name, span in named.items()}
    assert kinds["send origin"] is trace.SpanKind.PRODUCER
    assert kinds["create delays"] is trace.SpanKind.PRODUCER
    assert kinds["process orders"] is trace.SpanKind.CONSUMER
    ops = {
        name: (span.attributes or {})["messaging.operation.type"] for name, span in named.items()
    }
    assert ops["send origin"] == "send" and ops["create delays"] == "create"
    assert ops["process origin"] == ops["process orders"] == "process"
    assert (named["process orders"].attributes or {})["messaging.message.id"] == "f1"
    # The straight path is each hop's outcome attribute, not an event.
    assert (named["process origin"].attributes or {})[tracing.OUTCOME] == "scheduled"
    assert (named["process delays"].attributes or {})[tracing.OUTCOME] == "published"
    assert not [e.name for span in finished for e in span.events]
    # What the relay published carries its process span on: no send span of its own.
    assert carried_span(p.sink.on(FINAL)[0]) == ids(named["process delays"])


def test_a_duplicate_shows_its_dedup_decision_and_its_log_lines_carry_the_trace(
    spans: InMemorySpanExporter,
) -> None:
    p = Pipeline()
    p.publisher.publish(b"order 1", dedup_key="k1")
    lines = io.StringIO()
    handler = logging.StreamHandler(lines)
    handler.setFormatter(CloudLoggingFormatter(project="p"))
    decisions = logging.getLogger("pubsub_toolkit.decisions")
    decisions.addHandler(handler)
    level = decisions.level
    decisions.setLevel(logging.INFO)
    try:
        p.ingress.handle(p.origin())
        p.ingress.handle(p.origin())  # Pub/Sub delivers it again
    finally:
        decisions.removeHandler(handler)
        decisions.setLevel(level)

    first, again = [s for s in spans.get_finished_spans() if s.name == "process origin"]
    events = {e.name: e for e in again.events}
    assert "pubsub_toolkit.duplicate" in events
    assert (events["pubsub_toolkit.duplicate"].attributes or {})["dedup_key"] == "k1"
    assert (again.attributes or {})["pubsub_toolkit.outcome"] == "duplicate"
    # Both deliveries continue the producer's trace.
    [sent] = [s for s in spans.get_finished_spans() if s.name == "send origin"]
    assert first.context.trace_id == again.context.trace_id == sent.context.trace_id
    logged = [json.loads(line) for line in lines.getvalue().splitlines()]
    trace_id = f"{sent.context.trace_id:032x}"
    duplicate = [entry for entry in logged if entry.get("outcome") == "duplicate"]
    assert duplicate and all(
        entry["logging.googleapis.com/trace"] == f"projects/p/traces/{trace_id}"
        and entry["logging.googleapis.com/spanId"] == f"{again.context.span_id:016x}"
        and entry["logging.googleapis.com/trace_sampled"] is True
        for entry in duplicate
    )


def test_a_parked_message_released_later_joins_its_own_trace(
    spans: InMemorySpanExporter,
) -> None:
    p = Pipeline()
    for key in ("k1", "k2"):
        p.publisher.publish(key.encode(), dedup_key=key, fifo_group="g")
    for index in (0, 1):
        p.ingress.handle(p.origin(index))
    first, second = (delivered(m, f"f{i}") for i, m in enumerate(p.sink.on(FINAL)))
    assert p.consumer.process(second) == "parked"
    p.consumer.process(first)  # runs #1, then releases the parked #2
    assert [m.data for m in p.handled] == [b"k1", b"k2"]

    sends = [s for s in spans.get_finished_spans() if s.name == "send origin"]
    runs = [s for s in spans.get_finished_spans() if s.name == "process orders"]
    trace_of = {(s.attributes or {})[tracing.DEDUP_KEY]: s.context.trace_id for s in sends}
    # #2's run from #1's delivery is a span in #2's own trace, linked to #1's delivery.
    [released] = [
        r
        for r in runs
        if r.parent is not None
        and r.context.trace_id == trace_of["k2"]
        and (r.attributes or {}).get(tracing.OUTCOME) == "processed"
    ]
    assert (released.attributes or {})[tracing.DEDUP_KEY] == "k2"
    [delivery_1] = [r for r in runs if r.context.trace_id == trace_of["k1"]]
    assert delivery_1.context.span_id in {link.context.span_id for link in released.links}
    # The gate's decisions on #1's delivery carry the dedup key of the message they are about.
    [parked] = [e for r in runs for e in r.events if e.name == "pubsub_toolkit.parked"]
    assert (parked.attributes or {})["dedup_key"] == "k2"
    assert trace_of["k1"] != trace_of["k2"]


def test_tracing_off_adds_nothing_and_a_retried_publish_keeps_its_fingerprint() -> None:
    assert not tracing.enabled()
    p = Pipeline()
    p.publisher.publish(b"order 1", dedup_key="k1")
    [sent] = p.sink.on(ORIGIN)
    assert tracing.TRACEPARENT not in sent.attributes
    # A copy carrying trace context (a retry, traced) is the same content.
    traced = {**sent.attributes, tracing.TRACEPARENT: "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
    assert attr.content_fingerprint(sent.data, traced) == attr.content_fingerprint(
        sent.data, sent.attributes
    )


def test_a_bad_tracing_setting_names_the_variable() -> None:
    from pubsub_toolkit.errors import ConfigurationError

    with pytest.raises(
        ConfigurationError, match="PUBSUB_TOOLKIT_TRACING must be on or off, not 'maybe'"
    ):
        tracing.configure_from_env({"PUBSUB_TOOLKIT_TRACING": "maybe"})
    assert tracing.configure_from_env({"PUBSUB_TOOLKIT_TRACING": "off"}) is False
    assert not tracing.enabled()


def test_the_carried_context_is_what_the_w3c_propagator_writes(
    spans: InMemorySpanExporter,
) -> None:
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    propagator = TraceContextTextMapPropagator()
    for flags, state in ((TraceFlags.SAMPLED, TraceState()), (0, TraceState([("v", "1")]))):
        context = SpanContext(0xABC, 0xDEF, False, TraceFlags(flags), trace_state=state)
        with trace.use_span(NonRecordingSpan(context)):
            ours = tracing.with_context({"kind": "x", tracing.TRACEPARENT: "stale"})
            theirs: dict[str, str] = {}
            propagator.inject(theirs)
        assert ours == {"kind": "x"} | {tracing.CONTEXT_PREFIX + k: v for k, v in theirs.items()}


def test_a_body_that_never_became_a_message_is_dead_lettered_under_a_send_span_of_its_own(
    spans: InMemorySpanExporter,
) -> None:
    """No process span is open for a push body that does not parse: its dead letter is traced
    as a send of its own (hop ingress), and the copy carries that span on."""
    p = Pipeline()
    assert p.ingress.handle_push_body(b"not a push body").outcome.value == "dead_lettered"
    [send] = spans.get_finished_spans()
    assert send.name == "send dlq" and send.kind is trace.SpanKind.PRODUCER
    assert (send.attributes or {})[tracing.HOP] == "ingress"
    [dead] = p.sink.on(DLQ)
    assert carried_span(dead) == ids(send)
