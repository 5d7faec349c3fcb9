"""Cloud Function (2nd gen) template `consumer`: final topic -> dedup + FIFO gate -> your handler.

Set ``HANDLER=module:function`` (the module ships in this folder, like ``example_handler.py``)
and ``CONSUMER_ID``; the rest of the configuration is the README's. Two entry points:

* ``consumer`` - the Pub/Sub trigger on the final topic. Returning acks; raising (a transient
  failure, a handler error below the poison limit) makes Pub/Sub deliver again.
* ``sweep`` - an HTTP function for Cloud Scheduler (e.g. every minute): runs parked heads and
  acts on gap timeouts, which a serverless consumer cannot do between events.
"""

from __future__ import annotations

import importlib
import json
import os
import threading

import functions_framework
from cloudevents.http import CloudEvent
from flask import Request

from pubsub_toolkit.cloudevent import message_from_event_data
from pubsub_toolkit.config import ConsumerSettings, Settings
from pubsub_toolkit.consumer.processor import Handler, MessageProcessor
from pubsub_toolkit.errors import ConfigurationError, PermanentError
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import configure_logging

_lock = threading.Lock()
_processor: MessageProcessor | None = None


def load_handler(spec: str) -> Handler:
    """Import ``module:function``; a clear ConfigurationError if it is not there."""
    module_name, _, function_name = spec.partition(":")
    if not module_name or not function_name:
        raise ConfigurationError(f"HANDLER={spec!r} must look like module:function")
    try:
        handler = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"HANDLER={spec!r} cannot be loaded: {exc}") from exc
    if not callable(handler):
        raise ConfigurationError(f"HANDLER={spec!r} is not callable")
    return handler  # type: ignore[no-any-return]


def _get_processor() -> MessageProcessor:
    global _processor
    with _lock:
        if _processor is None:
            configure_logging()
            spec = os.environ.get("HANDLER", "")
            if not spec:
                raise ConfigurationError(
                    "environment variable HANDLER is required (module:function)"
                )
            _processor = MessageProcessor.from_settings(
                Settings.from_env(), ConsumerSettings.from_env(), load_handler(spec)
            )
        return _processor


@functions_framework.cloud_event
def consumer(cloud_event: CloudEvent) -> None:
    """Entry point for the Pub/Sub trigger on the final topic."""
    processor = _get_processor()
    try:
        message = message_from_event_data(cloud_event.data)
    except PermanentError as exc:
        # Not a Pub/Sub message: dead-letter the raw event with the reason, then ack.
        raw = json.dumps(cloud_event.data, default=str).encode()
        processor.reject(Message(raw), exc)
        return
    processor.process(message)


@functions_framework.http
def sweep(request: Request) -> dict[str, object]:
    """Entry point for Cloud Scheduler: the gate's periodic work for every group."""
    gate = _get_processor().gate
    outcomes = {group: gate.sweep(group).outcome.value for group in gate.groups()}
    return {"swept": len(outcomes), "outcomes": outcomes}
