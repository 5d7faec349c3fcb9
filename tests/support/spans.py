"""The test process's one OpenTelemetry tracer provider, with an in-memory exporter.

OpenTelemetry lets a process set its global provider once, so every test that reads spans
shares this exporter (cleared around each test) through :func:`memory_spans`.
"""

from __future__ import annotations

from collections.abc import Iterator

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from pubsub_toolkit import tracing

_exporter = InMemorySpanExporter()
_installed: list[TracerProvider] = []


def memory_spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on, spans kept in memory; off again (and cleared) afterwards."""
    if not _installed:
        provider = trace.get_tracer_provider()
        if not isinstance(provider, TracerProvider):
            provider = TracerProvider()
            trace.set_tracer_provider(provider)
        provider.add_span_processor(SimpleSpanProcessor(_exporter))
        _installed.append(provider)
    _exporter.clear()
    tracing.enable()
    try:
        yield _exporter
    finally:
        tracing.enable(False)
        _exporter.clear()
