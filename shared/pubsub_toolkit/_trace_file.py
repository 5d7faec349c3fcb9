"""Spans as JSON lines in a file: the local stack's exporter (``PUBSUB_TOOLKIT_TRACE_FILE``), read
back by ``pubsub-toolkit trace``.

Each process appends one JSON object per finished span (a line is written whole under a
lock, and ``O_APPEND`` keeps lines from several processes apart), so one file holds the
spans of every hop of the local stack.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExportResult


def span_record(span: ReadableSpan) -> dict[str, Any]:
    """One span as a plain dict (ids in hex, as Cloud Trace and W3C write them)."""
    context = span.get_span_context()
    assert context is not None
    return {
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_id": f"{span.parent.span_id:016x}" if span.parent is not None else None,
        "name": span.name,
        "kind": span.kind.name,
        "start": span.start_time,
        "end": span.end_time,
        "attributes": dict(span.attributes or {}),
        "events": [
            {"name": e.name, "time": e.timestamp, "attributes": dict(e.attributes or {})}
            for e in span.events
        ],
        "links": [
            {
                "trace_id": f"{link.context.trace_id:032x}",
                "span_id": f"{link.context.span_id:016x}",
                "attributes": dict(link.attributes or {}),
            }
            for link in span.links
        ],
        "status": span.status.status_code.name,
    }


class JsonLinesExporter:
    """An OpenTelemetry ``SpanExporter`` appending each span to ``path`` as a JSON line."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        from opentelemetry.sdk.trace.export import SpanExportResult

        lines = "".join(json.dumps(span_record(s), default=str) + "\n" for s in spans)
        with self._lock:
            fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, lines.encode())
            finally:
                os.close(fd)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        """Nothing to release: the file is opened per export."""

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


def install_file_exporter(path: str) -> None:
    """Make the global tracer provider (an SDK one, created if none is set) export every
    span to ``path`` as it ends."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter(path)))  # type: ignore[arg-type]


def read_spans(path: str) -> Iterator[dict[str, Any]]:
    """The spans in ``path``, in the order they ended (a torn last line is skipped)."""
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue
