"""App Engine service `relay`: Cloud Tasks calls POST /release at each message's due time.

A thin Flask layer over :class:`pubsub_toolkit.delay.relay.Relay`: authenticate (OIDC token or App
Engine's queue header), release, and map the outcome to a status Cloud Tasks understands - 2xx only
after the publish resolved, 5xx on a transient failure (Cloud Tasks retries) except on the queue's
last attempt (read from the task's retry-count header against
``PUBSUB_TOOLKIT_TASKS_MAX_ATTEMPTS``), where the relay dead-letters rather than let the task be
dropped, 401/403 for a request that is not from Cloud Tasks.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import cast

from flask import Flask, jsonify, request
from flask.typing import ResponseReturnValue

from pubsub_toolkit.config import Settings
from pubsub_toolkit.delay.attempts import attempt_from_headers, max_attempts_from_env
from pubsub_toolkit.delay.auth import AuthError, RequestAuthenticator, authenticator_from_settings
from pubsub_toolkit.delay.relay import Relay
from pubsub_toolkit.errors import TransientError
from pubsub_toolkit.metrics import configure_metrics_from_env
from pubsub_toolkit.observability import configure_logging
from pubsub_toolkit.stats import CounterFlusher
from pubsub_toolkit.stores.factory import stats_store_from_settings
from pubsub_toolkit.stores.stats.base import RELAY_SCOPE
from pubsub_toolkit.tracing_setup import configure_entry_point

logger = logging.getLogger("pubsub_toolkit.relay")
MAX_BODY_BYTES = 1_100_000  # a Cloud Tasks task is at most 1 MB


def create_app(
    settings: Settings | None = None,
    *,
    relay: Relay | None = None,
    authenticator: RequestAuthenticator | None = None,
) -> Flask:
    """The relay's Flask app. Reads the environment only when no parts are passed in (tracing,
    ``PUBSUB_TOOLKIT_TRACING`` and ``PUBSUB_TOOLKIT_TRACE_FILE``, is read from it always: once per
    process)."""
    configure_logging(project=os.environ.get("GOOGLE_CLOUD_PROJECT") or None)
    configure_entry_point(os.environ, service="relay")
    if relay is None or authenticator is None:
        settings = settings or Settings.from_env()
        if settings.delay is None:
            from pubsub_toolkit.errors import ConfigurationError

            raise ConfigurationError("PUBSUB_TOOLKIT_TASKS_QUEUE is required by the relay")
        if relay is None:
            relay = Relay.from_settings(
                settings, task_max_attempts=max_attempts_from_env(os.environ)
            )
            _observe(relay, settings)
        authenticator = authenticator or authenticator_from_settings(settings.delay)
    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES

    @app.get("/healthz")
    def healthz() -> ResponseReturnValue:
        return jsonify(status="ok")

    @app.post("/release")
    def release() -> ResponseReturnValue:
        try:
            # werkzeug's Headers: a case-insensitive mapping of str that mypy does not know as
            # a Mapping (a dict copy would lose the case-insensitive lookup).
            headers = cast("Mapping[str, str]", request.headers)
            caller = authenticator.authenticate(headers)
            # Read only once authenticated: then the headers are Cloud Tasks' own.
            result = relay.release(request.get_data(), attempt=attempt_from_headers(headers))
        except AuthError as exc:
            logger.warning("refused release request: %s", exc.detail)
            return jsonify(error=exc.detail), exc.status
        except TransientError as exc:
            logger.warning("transient failure, Cloud Tasks will retry: %s", exc)
            return jsonify(error=str(exc)), 503
        return jsonify(outcome=result.outcome, dedup_key=result.dedup_key, caller=caller), 200

    return app


def _observe(relay: Relay, settings: Settings) -> None:
    """The relay's counters and lateness histogram: flushed (under the relay's own scope: its
    outcome names are ingress's too) for the status page's charts, and exported through
    OpenTelemetry when PUBSUB_TOOLKIT_METRICS_EXPORTER says so."""
    if settings.stats_flush is not None:
        store = stats_store_from_settings(settings, scope=RELAY_SCOPE)
        interval = settings.stats_flush.total_seconds()
        CounterFlusher(relay.metrics, store, interval=interval).start()
    configure_metrics_from_env(os.environ, relay.metrics, component="relay")
