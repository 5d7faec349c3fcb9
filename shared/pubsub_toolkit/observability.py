"""Structured decision logs in Cloud Logging's JSON format, and counters tests can read.

Every decision about a message (processed, duplicate, mismatch, dead-lettered, retried) is one
JSON line on stdout with ``severity``, ``message``, ``outcome``, ``dedup_key`` and ``consumer``.
Cloud Functions and App Engine forward stdout JSON to Cloud Logging as structured entries, and
the log-based metrics in terraform/ count them.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections import Counter
from collections.abc import Mapping
from typing import Any

LOGGER_NAME = "pubsub_toolkit"
_DECISION_FIELD = "decision"


class Metrics:
    """Thread-safe named counters (duplicates, mismatches, dead-letters, ...)."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def increment(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self._counts[name] += amount

    def snapshot(self) -> dict[str, int]:
        """A copy of every counter."""
        with self._lock:
            return dict(self._counts)

    def get(self, name: str) -> int:
        with self._lock:
            return self._counts[name]


class CloudLoggingFormatter(logging.Formatter):
    """Formats records as one-line JSON objects that Cloud Logging parses."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "severity": record.levelname,
            "message": record.getMessage(),
            "logger": record.name,
        }
        fields = getattr(record, _DECISION_FIELD, None)
        if isinstance(fields, Mapping):
            entry.update(fields)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class _StdoutHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stdout`` is at emit time (it may be swapped, e.g. by pytest)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stdout
        super().emit(record)


def configure_logging(level: int = logging.INFO) -> None:
    """Send the toolkit's logs to stdout as Cloud Logging JSON (idempotent; for entry points)."""
    logger = logging.getLogger(LOGGER_NAME)
    if any(isinstance(h.formatter, CloudLoggingFormatter) for h in logger.handlers):
        return
    handler = _StdoutHandler()
    handler.setFormatter(CloudLoggingFormatter())
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False


class DecisionLog:
    """Logs one structured line per decision and counts it in :class:`Metrics`."""

    def __init__(self, consumer: str, metrics: Metrics | None = None) -> None:
        self.consumer = consumer
        self.metrics = metrics or Metrics()
        self._logger = logging.getLogger(f"{LOGGER_NAME}.decisions")

    def decision(
        self,
        outcome: str,
        message: str,
        *,
        dedup_key: str | None,
        level: int = logging.INFO,
        **fields: Any,
    ) -> None:
        """Record that ``outcome`` was decided for the message with ``dedup_key``."""
        self.metrics.increment(outcome)
        payload = {"outcome": outcome, "dedup_key": dedup_key, "consumer": self.consumer, **fields}
        self._logger.log(level, message, extra={_DECISION_FIELD: payload})
