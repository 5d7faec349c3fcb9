"""Cloud Function (2nd gen) `ingress`: origin topic -> validate, dedup, route -> final topic.

A thin adapter: all logic lives in pubsub_toolkit.ingress. Configuration comes from the
environment (see the README) and is read on the first event, not at import time, so a missing
variable is reported as a clear error in the logs instead of a failed deployment health check.
Returning normally acks the event; raising (a transient failure) makes Pub/Sub deliver it again.
A delivery whose dedup key another instance is processing right now (an expected race between
redeliveries) is answered 503 instead, leaving the dedup decision ``in_progress`` (INFO, with
the key and message id) as its one log line: Flask logs every raised exception as an ERROR
with a traceback, which buried real errors under hundreds of these.
"""

from __future__ import annotations

import logging
import threading

import flask
import functions_framework
from cloudevents.http import CloudEvent

from pubsub_toolkit.config import Settings
from pubsub_toolkit.errors import ClaimInProgressError
from pubsub_toolkit.ingress.pipeline import Ingress
from pubsub_toolkit.observability import LOGGER_NAME, configure_logging
from pubsub_toolkit.operations.stats import CounterFlusher
from pubsub_toolkit.stores.factory import stats_store_from_settings

_lock = threading.Lock()
_logger = logging.getLogger(f"{LOGGER_NAME}.ingress")
_ingress: Ingress | None = None


def _get_ingress() -> Ingress:
    # Clients are created once per instance and reused across events.
    global _ingress
    with _lock:
        if _ingress is None:
            configure_logging()
            settings = Settings.from_env()
            _ingress = Ingress.from_settings(settings)
            # The dashboard's dedup hit rate: counter deltas go to the dedup backend every few
            # seconds from a background thread, never on the message path. 0 turns it off.
            if settings.stats_flush is not None:
                store = stats_store_from_settings(settings)
                interval = settings.stats_flush.total_seconds()
                CounterFlusher(_ingress.metrics, store, interval=interval).start()
        return _ingress


@functions_framework.cloud_event
def ingress(cloud_event: CloudEvent) -> None:
    """Entry point for the Pub/Sub trigger on the origin topic."""
    try:
        _get_ingress().handle_event_data(cloud_event.data)
    except ClaimInProgressError as exc:
        # Not a failure: the other holder finishes it, and this copy comes back as a duplicate.
        # The dedup decision log has said so at INFO already; any non-2xx makes Pub/Sub
        # redeliver, and an HTTPException is answered without Flask's ERROR traceback.
        _logger.debug("answering 503: %s", exc)
        flask.abort(503, description="being processed elsewhere; deliver again later")
