"""Cloud Function (2nd gen) `ingress`: origin topic -> validate, dedup, route -> final topic.

A thin HTTP adapter over pubsub_toolkit.ingress, behind the push subscription on the origin
topic that the deployment owns (OIDC-authenticated, with our dead-letter and retry policies).
It reads the raw push body itself - so the message id, publish time, attributes and ordering
key arrive as Pub/Sub sent them - and also accepts the CloudEvent an Eventarc trigger sends.

Configuration comes from the environment (see the README) and is read on the first request,
not at import time, so a missing variable is reported as a clear error in the logs instead of
a failed deployment health check. A 2xx answer acks the message; an exception (a transient
failure) is answered 500, and Pub/Sub delivers it again after the subscription's backoff.
A delivery whose dedup key another instance is processing right now (an expected race between
redeliveries) is answered 503 instead, leaving the dedup decision ``in_progress`` (INFO, with
the key and message id) as its one log line: Flask logs every raised exception as an ERROR
with a traceback, which buried real errors under hundreds of these.
"""

from __future__ import annotations

import logging
import os
import threading

import flask
import functions_framework

from pubsub_toolkit.config import Settings
from pubsub_toolkit.errors import ClaimInProgressError
from pubsub_toolkit.ingress.pipeline import Ingress
from pubsub_toolkit.metrics import configure_metrics_from_env
from pubsub_toolkit.observability import LOGGER_NAME, configure_logging
from pubsub_toolkit.stats import CounterFlusher
from pubsub_toolkit.stores.factory import stats_store_from_settings
from pubsub_toolkit.tracing_setup import configure_entry_point

_lock = threading.Lock()
_logger = logging.getLogger(f"{LOGGER_NAME}.ingress")
_ingress: Ingress | None = None


def _get_ingress() -> Ingress:
    # Clients are created once per instance and reused across requests.
    global _ingress
    with _lock:
        if _ingress is None:
            configure_logging(project=os.environ.get("GOOGLE_CLOUD_PROJECT") or None)
            configure_entry_point(
                os.environ, service="ingress"
            )  # PUBSUB_TOOLKIT_TRACING, PUBSUB_TOOLKIT_TRACE_FILE
            settings = Settings.from_env()
            ingress = Ingress.from_settings(settings)
            # PUBSUB_TOOLKIT_METRICS_EXPORTER: the metrics through OpenTelemetry (read at export,
            # off the path).
            configure_metrics_from_env(os.environ, ingress.metrics, component="ingress")
            # The dashboard's dedup hit rate: counter deltas go to the dedup backend every few
            # seconds from a background thread, never on the message path. 0 turns it off.
            if settings.stats_flush is not None:
                store = stats_store_from_settings(settings)
                interval = settings.stats_flush.total_seconds()
                CounterFlusher(ingress.metrics, store, interval=interval).start()
            # Kept only once every step above succeeded: a start that failed part-way must fail
            # again on the next request, not leave an instance without metrics or stats.
            _ingress = ingress
        return _ingress


@functions_framework.http
def ingress(request: flask.Request) -> tuple[str, int]:
    """Entry point for the push subscription on the origin topic."""
    if request.method != "POST":  # Pub/Sub only POSTs: a probe is no message to dead-letter
        return "POST a Pub/Sub push request here", 405
    try:
        result = _get_ingress().handle_push_body(request.get_data())
    except ClaimInProgressError as exc:
        # Not a failure: the other holder finishes it, and this copy comes back as a duplicate.
        # The dedup decision log has said so at INFO already; any non-2xx makes Pub/Sub
        # redeliver.
        _logger.debug("answering 503: %s", exc)
        return "being processed elsewhere; deliver again later", 503
    return result.outcome.value, 200
