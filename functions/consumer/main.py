"""Cloud Function (2nd gen) template `consumer`: final topic -> dedup + FIFO gate -> your handler.

Set ``PUBSUB_TOOLKIT_HANDLER=module:function`` (the module ships in this folder, like
``example_handler.py``) and ``PUBSUB_TOOLKIT_CONSUMER_ID``; the rest of the configuration is the
README's. One HTTP entry point, ``consumer``, serves two callers:

* the push subscription on the final topic (OIDC-authenticated, our dead-letter and retry
  policies, message ordering on), at any path but ``/sweep``: the raw push body is decoded
  here, so message id, publish time, attributes and ordering key are Pub/Sub's. A 2xx answer
  acks; an exception (a transient failure, a handler error below the poison limit) is
  answered 500 and Pub/Sub delivers it again;
* Cloud Scheduler, at ``/sweep`` (every minute by default): runs parked heads and acts on gap
  timeouts of every group, which a serverless consumer cannot do between messages.

(``sweep`` is still an entry point of its own, for deployments that scheduled it separately.)

``PUBSUB_TOOLKIT_HANDLER`` may name an ``async def`` function: it then runs on the async stores
(``redis.asyncio``, Firestore's ``AsyncClient``) on one event loop per instance, which the
requests' threads hand each message to (``AsyncMessageProcessor.blocking()``).
"""

from __future__ import annotations

import importlib
import os
import threading

import functions_framework
from flask import Request

from pubsub_toolkit.cloudevent import message_from_push_body
from pubsub_toolkit.config import ConsumerSettings, Settings
from pubsub_toolkit.consumer.processor import AsyncHandler, Handler, MessageProcessor
from pubsub_toolkit.consumer.processor_async import AsyncMessageProcessor, BlockingProcessor
from pubsub_toolkit.errors import ConfigurationError, PermanentError
from pubsub_toolkit.message import Message
from pubsub_toolkit.metrics import FifoSource, configure_metrics_from_env
from pubsub_toolkit.observability import configure_logging
from pubsub_toolkit.tracing_setup import configure_entry_point

_lock = threading.Lock()
_processor: MessageProcessor | BlockingProcessor | None = None


def load_handler(spec: str) -> Handler | AsyncHandler:
    """Import ``module:function``; a clear ConfigurationError if it is not there."""
    module_name, _, function_name = spec.partition(":")
    if not module_name or not function_name:
        raise ConfigurationError(f"PUBSUB_TOOLKIT_HANDLER={spec!r} must look like module:function")
    try:
        handler = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(
            f"PUBSUB_TOOLKIT_HANDLER={spec!r} cannot be loaded: {exc}"
        ) from exc
    if not callable(handler):
        raise ConfigurationError(f"PUBSUB_TOOLKIT_HANDLER={spec!r} is not callable")
    return handler  # type: ignore[no-any-return]


def _get_processor() -> MessageProcessor | BlockingProcessor:
    global _processor
    with _lock:
        if _processor is None:
            configure_logging(project=os.environ.get("GOOGLE_CLOUD_PROJECT") or None)
            configure_entry_point(
                os.environ, service="consumer"
            )  # PUBSUB_TOOLKIT_TRACING, PUBSUB_TOOLKIT_TRACE_FILE
            spec = os.environ.get("PUBSUB_TOOLKIT_HANDLER", "")
            if not spec:
                raise ConfigurationError(
                    "environment variable PUBSUB_TOOLKIT_HANDLER is required (module:function)"
                )
            # No lease is held between requests (PUBSUB_TOOLKIT_FIFO_LEASE_HOLD_SECONDS unset): the
            # group's next push may reach another instance, which would wait for a held lease.
            processor = MessageProcessor.from_settings(
                Settings.from_env(), ConsumerSettings.from_env(), load_handler(spec)
            )
            if isinstance(processor, AsyncMessageProcessor):
                # PUBSUB_TOOLKIT_METRICS_EXPORTER as below, without the FIFO gauges: they list
                # groups through a synchronous store, from the exporter's thread.
                configure_metrics_from_env(
                    os.environ, processor.gate.log.metrics, component="consumer"
                )
                _processor = processor.blocking()  # an async def handler, on its own loop
            else:
                # PUBSUB_TOOLKIT_METRICS_EXPORTER: decisions, dead letters, handler time and the
                # groups' backlog through OpenTelemetry (read at export time, off the message path).
                gate = processor.gate
                fifo = FifoSource(gate.store, gate.consumer)
                configure_metrics_from_env(
                    os.environ, gate.log.metrics, component="consumer", fifo=fifo
                )
                # Kept only once the metrics are set up: a start that failed part-way must fail
                # again on the next request, not run the handler with no metrics.
                _processor = processor
        return _processor


@functions_framework.http
def consumer(request: Request) -> tuple[str, int] | dict[str, object]:
    """Entry point for the push subscription on the final topic, and ``/sweep``."""
    if request.method != "POST":  # Pub/Sub and Cloud Scheduler only POST: a probe is no message
        return "POST a Pub/Sub push request (or the sweep) here", 405
    if request.path.rstrip("/").endswith("/sweep"):
        return _sweep()
    processor = _get_processor()
    body = request.get_data()
    try:
        message = message_from_push_body(body)
    except PermanentError as exc:
        # Not a Pub/Sub message: dead-letter the body as it came, with the reason, then ack.
        processor.reject(Message(body), exc)
        return exc.reason, 200
    return processor.process(message), 200


@functions_framework.http
def sweep(request: Request) -> dict[str, object]:
    """Cloud Scheduler's target: the gate's periodic work for every group."""
    return _sweep()


def _sweep() -> dict[str, object]:
    gate = _get_processor().gate
    outcomes = {group: gate.sweep(group).outcome.value for group in gate.groups()}
    return {"swept": len(outcomes), "outcomes": outcomes}
