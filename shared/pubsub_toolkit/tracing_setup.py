"""Tracing at an entry point's start: ``TRACING`` and ``TRACE_FILE`` read once, spans exported.

Ingress, the relay and the consumer call :func:`configure_entry_point` where they configure
logging (on the first request, like the rest of their settings). It turns the toolkit's spans on
or off (:func:`pubsub_toolkit.tracing.configure_from_env`: a value of ``TRACING`` that is not
on/off is a ConfigurationError naming the variable) and decides where the spans go:

* ``TRACE_FILE`` set (the local stack): one JSON line per span in that file, read back by
  ``pubsub-toolkit trace``;
* otherwise (production): to Cloud Trace through a ``BatchSpanProcessor`` with
  ``CloudTraceSpanExporter``, when ``opentelemetry-exporter-gcp-trace`` is installed (the
  ``tracing`` extra); without it, one WARNING says that no exporter is configured and the spans
  are dropped. A tracer provider the process configured itself (``opentelemetry-instrument``,
  your own code) is left as it is: its exporters get the spans.

Later calls in the same process return the first call's answer and change nothing, so an app
factory called twice never exports each span twice.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Mapping

from pubsub_toolkit import tracing
from pubsub_toolkit.errors import MissingDependencyError

logger = logging.getLogger(__name__)

CLOUD_TRACE_MODULE = "opentelemetry.exporter.cloud_trace"
NO_EXPORTER_WARNING = (
    "TRACING=on but no span exporter is configured, so spans are dropped: install "
    "opentelemetry-exporter-gcp-trace (pip install 'pubsub-toolkit[tracing]') to send them to "
    "Cloud Trace, or set TRACE_FILE to write them to a file"
)

_lock = threading.Lock()
_configured: list[bool] = []  # the first call's answer, once there was one


def configure_entry_point(env: Mapping[str, str], *, service: str) -> bool:
    """Read ``TRACING``/``TRACE_FILE`` from ``env`` and set up export for ``service`` (the
    entry point's name, Cloud Trace's ``service.name``). Returns whether tracing is on."""
    with _lock:
        if _configured:
            return _configured[0]
        try:
            on = tracing.configure_from_env(env)
        except ImportError as exc:  # OpenTelemetry itself missing (google-cloud-pubsub brings it)
            raise MissingDependencyError(
                f"TRACING=on needs OpenTelemetry ({exc.name or exc}): pip install "
                "'pubsub-toolkit[tracing]'"
            ) from exc
        if on and not env.get("TRACE_FILE", "").strip():
            project = env.get("GOOGLE_CLOUD_PROJECT", "").strip() or None
            install_cloud_trace(project=project, service=service)
        _configured.append(on)
        return on


def install_cloud_trace(*, project: str | None, service: str) -> bool:
    """Export every span to Cloud Trace in batches; True if that is set up. False (after one
    WARNING) without the exporter, or (silently) when the process set its own provider."""
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        logger.info("tracing on: spans go to the tracer provider this process configured")
        return False
    try:
        cloud_trace = importlib.import_module(CLOUD_TRACE_MODULE)
    except ImportError:
        logger.warning(NO_EXPORTER_WARNING)
        return False
    exporter = (
        cloud_trace.CloudTraceSpanExporter(project_id=project)
        if project
        else cloud_trace.CloudTraceSpanExporter()
    )
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    logger.info("tracing on: spans go to Cloud Trace (project %s)", project or "from credentials")
    return True
