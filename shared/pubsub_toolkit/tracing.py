"""OpenTelemetry tracing: one trace per message across every hop - off by default.

A message crosses up to six processes (producer -> origin -> ingress -> Cloud Tasks -> relay ->
final -> consumer). With tracing on (:func:`enable`, or ``PUBSUB_TOOLKIT_TRACING=on`` read by the
entry points through :func:`configure_from_env`) every hop the toolkit owns makes spans named and
attributed per the OpenTelemetry messaging conventions for ``gcp_pubsub``:

* a message's creation - the producer's publish, a handler's - is a ``send`` span (PRODUCER)
  whose context travels in the message's ``googclient_traceparent`` attribute: the W3C
  ``traceparent`` that google-cloud-pubsub's own tracing uses, so a producer with the client's
  tracing on starts the same trace, and a consumer with it on continues it;
* a task created for a delayed message is a ``create`` span (PRODUCER) whose context travels
  in the task (inside the message it carries), so the relay's release joins the trace of the
  message's scheduling and links to it;
* each hop that handles a message (ingress, relay, consumer) is a ``process`` span (CONSUMER)
  whose parent is the context the message carries - also when the gate runs a message it had
  parked, from another delivery or a sweep (that span is linked to the one that released it);
* a hop that forwards what it handles (ingress, the relay: :class:`ForwardingSink`) publishes
  under its ``process`` span, which the forwarded message carries on: the forward is the hop's
  effect, timed by that span and named by its ``pubsub_toolkit.outcome`` (``published``); a
  ``send`` span of its own would double the SDK's cost per message for no new fact;
* the consumer's ack is a ``settle`` span; every decision off the straight path (duplicate,
  parked, released, poison, gap, mismatch, dead letter, ...) is an event on the span current
  at the time, with the dedup key (:class:`~pubsub_toolkit.observability.DecisionLog` adds
  it), the straight path's ``processed`` only the span's outcome; every log line written under
  a span carries Cloud Logging's trace fields.

Off, every hook is one module-level check and OpenTelemetry is never imported; the trace
attribute is excluded from content fingerprints (:func:`~pubsub_toolkit.attributes
.content_fingerprint`), so a retried publish with a new trace context is still the same content.

(About 400 lines: the span helpers each hop calls - :func:`handling`, :func:`sending`,
:func:`settling`, :func:`scheduled`, :class:`TracedSink`, :class:`ForwardingSink` - and the
carrier they share.)
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from pubsub_toolkit.environment import flag

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer

    from pubsub_toolkit.message import Message, OutboundMessage

logger = logging.getLogger(__name__)

# google-cloud-pubsub's attribute prefix for trace context (its OpenTelemetry tracing).
CONTEXT_PREFIX = "googclient_"
TRACEPARENT = CONTEXT_PREFIX + "traceparent"
TRACESTATE = CONTEXT_PREFIX + "tracestate"
TRACER_NAME = "pubsub_toolkit"
SYSTEM = "gcp_pubsub"
# The conventions' operation types, and the span kinds they go with.
CREATE, SEND, RECEIVE, PROCESS, SETTLE = "create", "send", "receive", "process", "settle"
# Attributes beyond the conventions, under the toolkit's own namespace.
DEDUP_KEY = "pubsub_toolkit.dedup_key"
HOP = "pubsub_toolkit.hop"
FIFO_GROUP = "pubsub_toolkit.fifo_group"
FIFO_SEQ = "pubsub_toolkit.fifo_seq"
OUTCOME = "pubsub_toolkit.outcome"
# The straight path's decision: the span's outcome attribute says it, no event (an event costs
# the SDK about a third of a span, once per message). Every other decision is an event.
ROUTINE_DECISIONS = frozenset({"processed"})

S = TypeVar("S")
# What every span helper returns when there is no span to make (tracing off, the hot path):
# stateless, so one for all calls rather than a new one each.
_NO_SPAN: contextlib.nullcontext[None] = contextlib.nullcontext()


class _State:
    """Whether tracing is on, and the OpenTelemetry pieces every hook uses (looked up once,
    at :func:`enable`: the hooks run per message)."""

    enabled = False
    tracer: Tracer | None = None
    trace: Any = None  # the opentelemetry.trace module
    context: Any = None  # the opentelemetry.context module
    propagator: Any = None  # W3C trace context


_state = _State()


def enable(on: bool = True) -> None:
    """Turn the toolkit's spans on (or off again). Spans go to OpenTelemetry's global tracer
    provider: configure it (an exporter) before, or use :func:`configure_from_env`."""
    if on:
        from opentelemetry import context, trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        _state.trace, _state.context = trace, context
        _state.propagator = TraceContextTextMapPropagator()
        _state.tracer = trace.get_tracer(TRACER_NAME)
    _state.enabled = on


def enabled() -> bool:
    return _state.enabled


def configure_from_env(env: Mapping[str, str]) -> bool:
    """For entry points: ``PUBSUB_TOOLKIT_TRACING`` on or off (default off, nothing else
    accepted); with ``PUBSUB_TOOLKIT_TRACE_FILE`` set, spans are also written there as JSON lines
    (the local stack's exporter, read by ``pubsub-toolkit trace``). Returns whether tracing is
    on."""
    if not flag(env, "PUBSUB_TOOLKIT_TRACING"):
        return False
    path = env.get("PUBSUB_TOOLKIT_TRACE_FILE", "").strip()
    if path:
        from pubsub_toolkit._trace_file import install_file_exporter

        install_file_exporter(path)
    enable()
    return True


class _Carrier:
    """OpenTelemetry's getter over message attributes, with the client's prefix (what is
    carried on is written by :func:`with_context`)."""

    def get(self, carrier: Mapping[str, str], key: str) -> list[str] | None:
        value = carrier.get(CONTEXT_PREFIX + key)
        return None if value is None else [value]

    def keys(self, carrier: Mapping[str, str]) -> list[str]:
        return [k.removeprefix(CONTEXT_PREFIX) for k in carrier if k.startswith(CONTEXT_PREFIX)]


_CARRIER = _Carrier()


def _carried(attributes: Mapping[str, str]) -> Context | None:
    if TRACEPARENT not in attributes:
        return None
    return _state.propagator.extract(attributes, getter=_CARRIER)  # type: ignore[no-any-return]


def with_context(attributes: Mapping[str, str]) -> Mapping[str, str]:
    """``attributes`` with the current span's context in ``googclient_traceparent`` (replacing
    the one it carried); unchanged when tracing is off or no span is current."""
    if not _state.enabled:
        return attributes
    context = _state.trace.get_current_span().get_span_context()
    if not context.is_valid:
        return attributes
    out = {k: v for k, v in attributes.items() if not k.startswith(CONTEXT_PREFIX)}
    # What the W3C propagator's inject writes, without its second context look-up: once per
    # forwarded message, so it counts (tests/unit/test_tracing.py checks the two agree).
    out[TRACEPARENT] = (
        f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    )
    if context.trace_state:
        out[TRACESTATE] = context.trace_state.to_header()
    return out


def _messaging(
    operation: str,
    destination: str,
    message: Message | OutboundMessage | None,
    hop: str,
    extra: Mapping[str, Any],
) -> dict[str, Any]:
    from pubsub_toolkit import attributes as attr

    fields: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": operation,
        "messaging.destination.name": destination.rsplit("/", 1)[-1],
        HOP: hop,
    }
    if message is not None:
        # The few that find and follow a message; every attribute costs the SDK a check.
        a = message.attributes
        message_id = getattr(message, "message_id", "")  # an outbound message has none yet
        if message_id:
            fields["messaging.message.id"] = message_id
        if message.ordering_key:
            fields["messaging.gcp_pubsub.message.ordering_key"] = message.ordering_key
        key = a.get(attr.DEDUP_KEY)
        if key:
            fields[DEDUP_KEY] = key
        group = a.get(attr.FIFO_GROUP)
        if group:
            fields[FIFO_GROUP] = group
            seq = a.get(attr.FIFO_SEQ, "")
            if seq.isdigit():
                fields[FIFO_SEQ] = int(seq)
    for name, value in extra.items():
        if value is not None:
            fields[name] = value
    return fields


class _Opened:
    """One span, current while the ``with`` block runs (an error recorded on it), then ended.

    A plain class rather than the SDK's ``start_as_current_span`` inside a generator-based
    context manager: those layers cost as much as the span itself, per message."""

    __slots__ = (
        "_fields",
        "_identity",
        "_kind",
        "_links",
        "_mark",
        "_name",
        "_parent",
        "_span",
        "_token",
    )

    def __init__(  # noqa: PLR0917 - private, three call sites
        self,
        kind: str,
        operation: str,
        destination: str,
        message: Message | OutboundMessage | None,
        hop: str,
        extra: Mapping[str, Any],
        parent: Context | None = None,
        links: list[Any] | None = None,
        identity: str | None = None,
    ) -> None:
        self._fields = _messaging(operation, destination, message, hop, extra)
        self._name = f"{operation} {self._fields['messaging.destination.name']}"
        self._kind, self._parent, self._links, self._identity = kind, parent, links, identity

    def __enter__(self) -> Span:
        trace = _state.trace
        assert _state.tracer is not None
        self._span = _state.tracer.start_span(
            self._name,
            context=self._parent,
            kind=getattr(trace.SpanKind, self._kind),
            attributes=self._fields,
            links=self._links,
        )
        self._token = _state.context.attach(trace.set_span_in_context(self._span))
        self._mark = None if self._identity is None else _handled.set(self._identity)
        return self._span

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        if exc is not None:
            self._span.record_exception(exc)
            self._span.set_status(_state.trace.Status(_state.trace.StatusCode.ERROR, repr(exc)))
        if self._mark is not None:
            _handled.reset(self._mark)
        _state.context.detach(self._token)
        self._span.end()


def handling(
    message: Message,
    destination: str,
    *,
    hop: str,
    operation: str = PROCESS,
    unless_current: bool = False,
    **extra: Any,
) -> contextlib.AbstractContextManager[Span | None]:
    """A CONSUMER span for ``hop`` handling ``message`` from ``destination`` (a subscription
    or queue), in the trace the message carries: child of the current span when that is in
    the same trace (the client's own subscribe span), else of the carried context, linked to
    the current span (the gate releasing a parked message from another's delivery). With
    ``unless_current``, nothing new when this very message's span is already current."""
    if not _state.enabled:
        return _NO_SPAN
    identity = _identity(message)
    if unless_current and _handled.get() == identity:
        return _NO_SPAN
    trace = _state.trace
    carried = _carried(message.attributes)
    links = []
    current = trace.get_current_span().get_span_context()
    if carried is not None:
        sender = trace.get_current_span(carried).get_span_context()
        links.append(trace.Link(sender))
        if current.is_valid and current.trace_id == sender.trace_id:
            carried = None  # the current span is this message's: a child of it
        elif current.is_valid:
            links.append(trace.Link(current, {"pubsub_toolkit.link": "released_by"}))
    return _Opened(
        "CONSUMER", operation, destination, message, hop, extra, carried, links, identity
    )


# The message whose CONSUMER span is current (see ``unless_current``).
_handled: contextvars.ContextVar[str | None] = contextvars.ContextVar("handled", default=None)


def _identity(message: Message) -> str:
    a = message.attributes
    return f"{a.get('dedup_key') or message.message_id}#{a.get('fifo_seq', '')}"


def sending(
    destination: str,
    message: Message | OutboundMessage | None = None,
    *,
    hop: str,
    operation: str = SEND,
    **extra: Any,
) -> contextlib.AbstractContextManager[Span | None]:
    """A PRODUCER span for publishing to ``destination`` (a topic) or creating a task in it (a
    queue, ``operation=CREATE``), child of the current span; put its context in the outbound
    attributes with :func:`with_context` inside it."""
    if not _state.enabled:
        return _NO_SPAN
    return _Opened("PRODUCER", operation, destination, message, hop, extra)


def settling(
    destination: str, message: Message, *, hop: str, **extra: Any
) -> contextlib.AbstractContextManager[Span | None]:
    """A CLIENT span for the ack (or nack) of ``message``, child of the current span."""
    if not _state.enabled:
        return _NO_SPAN
    return _Opened("CLIENT", SETTLE, destination, message, hop, extra)


def decision_event(outcome: str, fields: Mapping[str, Any]) -> None:
    """The decision as an event on the current span (DecisionLog calls this for every one);
    the straight path's (:data:`ROUTINE_DECISIONS`) as the span's outcome attribute instead."""
    if not _state.enabled:
        return
    span = _state.trace.get_current_span()
    if not span.is_recording():
        return
    if outcome in ROUTINE_DECISIONS:
        span.set_attribute(OUTCOME, outcome)  # the hop may set a more precise one after
        return
    event = {
        k: v if isinstance(v, (str, bool, int, float)) else str(v)
        for k, v in fields.items()
        if v is not None
    }
    if "dedup_key" not in event:  # a gate decision: the message's key is the span's
        key = (getattr(span, "attributes", None) or {}).get(DEDUP_KEY)
        if key is not None:
            event["dedup_key"] = key
    span.add_event(f"pubsub_toolkit.{outcome}", event)


def log_fields(project: str | None) -> dict[str, Any]:
    """Cloud Logging's trace fields for the span current now (none when off or outside one)."""
    if not _state.enabled:
        return {}
    context = _state.trace.get_current_span().get_span_context()
    if not context.is_valid:
        return {}
    trace_id = f"{context.trace_id:032x}"
    return {
        "logging.googleapis.com/trace": f"projects/{project}/traces/{trace_id}"
        if project
        else trace_id,
        "logging.googleapis.com/spanId": f"{context.span_id:016x}",
        "logging.googleapis.com/trace_sampled": context.trace_flags.sampled,
    }


class TracedSink:
    """A :class:`~pubsub_toolkit.producer.sink.MessageSink` whose publishes are ``send``
    spans, each message carrying its span's context; with tracing off, the sink itself."""

    def __init__(self, sink: Any, *, hop: str) -> None:
        self._sink = sink
        self._hop = hop

    def publish(self, topic: str, message: OutboundMessage) -> str:
        if not _state.enabled:
            return str(self._sink.publish(topic, message))
        with sending(topic, message, hop=self._hop) as span:
            carrying = _carrying(message)
            message_id = str(self._sink.publish(topic, carrying))
            if span is not None:
                span.set_attribute("messaging.message.id", message_id)
            return message_id

    def __getattr__(self, name: str) -> Any:  # close(), and whatever else the sink has
        return getattr(self._sink, name)


def traced(sink: S, *, hop: str) -> S:
    """``sink`` with its publishes traced (see :class:`TracedSink`); never wrapped twice."""
    return sink if isinstance(sink, TracedSink) else cast(S, TracedSink(sink, hop=hop))


class ForwardingSink(TracedSink):
    """A :class:`TracedSink` for a hop that forwards what it handles (ingress, the relay):
    under a span - the hop's ``process`` span - each message carries that span's context and
    gets no span of its own; published outside any span (a dead letter of a body that never
    became a message), it is a ``send`` span as through :class:`TracedSink`.

    Why no ``send`` span for a forward: the forward is the hop's effect, already timed and
    decided on its process span, and a second SDK span per message cost ingress as much again
    as the first (docs/reference/performance.md, "Tracing cost")."""

    def publish(self, topic: str, message: OutboundMessage) -> str:
        if not _state.enabled:
            return str(self._sink.publish(topic, message))
        carrying = _carrying(message)
        if carrying is message:  # no span current: nothing to forward under
            return super().publish(topic, message)
        return str(self._sink.publish(topic, carrying))


def forwarding(sink: S, *, hop: str) -> S:
    """``sink`` with its publishes carrying the current span's context (see
    :class:`ForwardingSink`); never wrapped twice."""
    return sink if isinstance(sink, ForwardingSink) else cast(S, ForwardingSink(sink, hop=hop))


def scheduled(
    schedule: Callable[[OutboundMessage], str], queue: str, message: OutboundMessage, *, hop: str
) -> str:
    """``schedule(message)`` (a Cloud Tasks task for it) as a ``create`` span whose context the
    task carries in the message, so its release joins the trace; with tracing off, the call."""
    if not _state.enabled:
        return schedule(message)
    with sending(queue, message, hop=hop, operation=CREATE):
        return schedule(_carrying(message))


def _carrying(message: OutboundMessage) -> OutboundMessage:
    """``message`` with the current span's context (see :func:`with_context`)."""
    attributes = with_context(message.attributes)
    if attributes is message.attributes:  # no span current: nothing to carry
        return message
    return type(message)(message.data, attributes, message.ordering_key)
