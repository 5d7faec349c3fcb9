"""Tracing at an entry point's start: ``PUBSUB_TOOLKIT_TRACING`` and ``PUBSUB_TOOLKIT_TRACE_FILE``
read once, spans exported.

Ingress, the relay and the consumer call :func:`configure_entry_point` where they configure logging
(on the first request, like the rest of their settings). It turns the toolkit's spans on or off
(:func:`pubsub_toolkit.tracing.configure_from_env`: a value of ``PUBSUB_TOOLKIT_TRACING`` that is
not on/off is a ConfigurationError naming the variable) and decides where the spans go:

* ``PUBSUB_TOOLKIT_TRACE_FILE`` set (the local stack): one JSON line per span in that file, read
  back by ``pubsub-toolkit trace``;
* otherwise, OpenTelemetry's own variable ``OTEL_TRACES_EXPORTER`` (a comma-separated list) names
  the exporters: ``otlp`` (OTLP over HTTP, or gRPC with ``OTEL_EXPORTER_OTLP_PROTOCOL=grpc``; the
  ``otlp`` extra), ``gcp_trace`` (Cloud Trace; the ``tracing`` extra), ``console`` or ``none``.
  Unset, it is ``otlp`` when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``) is set,
  else ``gcp_trace``. A named exporter that is not installed is a MissingDependencyError naming
  the extra; the default Cloud Trace one missing is one WARNING instead (spans are dropped).
  The SDK reads the rest itself: the OTLP endpoint, headers and timeout, ``OTEL_SERVICE_NAME``
  and ``OTEL_RESOURCE_ATTRIBUTES`` (they win over the entry point's own service name) and
  ``OTEL_TRACES_SAMPLER``/``_ARG``.

A tracer provider the process configured itself (``opentelemetry-instrument``, your own code)
is left as it is: its exporters get the spans. Later calls in the same process return the
first call's answer and change nothing, so an app factory called twice never exports each span
twice.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from collections.abc import Mapping
from typing import Any

from pubsub_toolkit import tracing
from pubsub_toolkit.environment import check_environment
from pubsub_toolkit.errors import ConfigurationError, MissingDependencyError

logger = logging.getLogger(__name__)

CLOUD_TRACE_MODULE = "opentelemetry.exporter.cloud_trace"
OTLP_MODULES = {
    "http/protobuf": "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "grpc": "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
}
EXPORTERS = ("otlp", "gcp_trace", "console", "none")
NO_EXPORTER_WARNING = (
    "PUBSUB_TOOLKIT_TRACING=on but no span exporter is configured, so spans are dropped: install "
    "opentelemetry-exporter-gcp-trace (pip install 'pubsub-toolkit[tracing]') to send them to "
    "Cloud Trace, set OTEL_EXPORTER_OTLP_ENDPOINT (pip install 'pubsub-toolkit[otlp]') to send "
    "them over OTLP, or set PUBSUB_TOOLKIT_TRACE_FILE to write them to a file"
)

_lock = threading.Lock()
_configured: list[bool] = []  # the first call's answer, once there was one


def configure_entry_point(env: Mapping[str, str], *, service: str) -> bool:
    """Check ``env`` (:func:`~pubsub_toolkit.environment.check_environment`: an unknown
    ``PUBSUB_TOOLKIT_*`` name stops the start), read ``PUBSUB_TOOLKIT_TRACING`` and
    ``PUBSUB_TOOLKIT_TRACE_FILE`` (and the ``OTEL_*`` variables) and set up export for
    ``service`` (the entry point's name: ``service.name`` unless ``OTEL_SERVICE_NAME`` says
    otherwise). Returns whether tracing is on."""
    check_environment(env)
    with _lock:
        if _configured:
            return _configured[0]
        try:
            on = tracing.configure_from_env(env)
        except ImportError as exc:  # OpenTelemetry itself missing (google-cloud-pubsub brings it)
            raise MissingDependencyError(
                f"PUBSUB_TOOLKIT_TRACING=on needs OpenTelemetry ({exc.name or exc}): pip install "
                "'pubsub-toolkit[tracing]'"
            ) from exc
        if on and not env.get("PUBSUB_TOOLKIT_TRACE_FILE", "").strip():
            install_exporters(env, service=service)
        _configured.append(on)
        return on


def _otel(env: Mapping[str, str], name: str) -> str:
    """An ``OTEL_*`` variable: from ``env``, else the process environment (where the SDK
    itself reads the others)."""
    return (env.get(name) or os.environ.get(name, "")).strip()


def exporter_names(env: Mapping[str, str]) -> list[str]:
    """The exporters to use: ``OTEL_TRACES_EXPORTER``, or the default described above."""
    raw = _otel(env, "OTEL_TRACES_EXPORTER").lower()
    if not raw:
        endpoint = _otel(env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or _otel(
            env, "OTEL_EXPORTER_OTLP_ENDPOINT"
        )
        return ["otlp"] if endpoint else ["gcp_trace"]
    names = [n.strip() for n in raw.split(",") if n.strip()]
    unknown = [n for n in names if n not in EXPORTERS]
    if unknown:
        raise ConfigurationError(
            f"OTEL_TRACES_EXPORTER={raw!r}: {', '.join(unknown)} is not one of "
            f"{', '.join(EXPORTERS)}"
        )
    return [] if "none" in names else names


def install_exporters(env: Mapping[str, str], *, service: str) -> list[str]:
    """Export every span through the exporters :func:`exporter_names` gives, in batches; the
    names installed (none after the one WARNING, or when the process set its own provider)."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    names = exporter_names(env)  # a bad value is refused before anything is set up
    if isinstance(trace.get_tracer_provider(), TracerProvider):
        logger.info("tracing on: spans go to the tracer provider this process configured")
        return []
    exporters: list[tuple[str, Any]] = []
    for name in names:
        exporter = _exporter(name, env, explicit=bool(_otel(env, "OTEL_TRACES_EXPORTER")))
        if exporter is not None:
            exporters.append((name, exporter))
    if not exporters:
        return []
    provider = TracerProvider(resource=service_resource(service))  # samples per OTEL_TRACES_SAMPLER
    for _, exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    installed = [name for name, _ in exporters]
    logger.info("tracing on: spans go to %s", ", ".join(installed))
    return installed


def service_resource(service: str) -> Any:
    """The SDK's resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES), named ``service``
    when neither names the service."""
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource

    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service}))
    return resource


def _exporter(name: str, env: Mapping[str, str], *, explicit: bool) -> Any:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if name == "otlp":
        protocol = _otel(env, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or _otel(
            env, "OTEL_EXPORTER_OTLP_PROTOCOL"
        )
        module = OTLP_MODULES.get(protocol or "http/protobuf")
        if module is None:
            raise ConfigurationError(
                f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: use http/protobuf or grpc"
            )
        extra = "otlp-grpc" if protocol == "grpc" else "otlp"
        return _load(module, extra=extra, needed_by="OTLP export").OTLPSpanExporter()
    try:  # gcp_trace
        cloud_trace = importlib.import_module(CLOUD_TRACE_MODULE)
    except ImportError as exc:
        if explicit:
            raise MissingDependencyError(
                "OTEL_TRACES_EXPORTER=gcp_trace needs opentelemetry-exporter-gcp-trace: "
                "pip install 'pubsub-toolkit[tracing]'"
            ) from exc
        logger.warning(NO_EXPORTER_WARNING)
        return None
    project = env.get("GOOGLE_CLOUD_PROJECT", "").strip() or None
    logger.info("Cloud Trace project: %s", project or "from credentials")
    return (
        cloud_trace.CloudTraceSpanExporter(project_id=project)
        if project
        else cloud_trace.CloudTraceSpanExporter()
    )


def _load(module: str, *, extra: str, needed_by: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f"{needed_by} needs {module.split('.trace_exporter', maxsplit=1)[0]}: pip install "
            f"'pubsub-toolkit[{extra}]'"
        ) from exc
