"""Structured decision logs in Cloud Logging's JSON format, and counters tests can read.

Every decision about a message (processed, duplicate, mismatch, dead-lettered, retried) is one
JSON line on stdout with ``severity``, ``message``, ``outcome``, ``dedup_key`` and ``consumer``.
Cloud Functions and App Engine forward stdout JSON to Cloud Logging as structured entries, and
the log-based metrics in terraform/ count them. With tracing on (:mod:`pubsub_toolkit.tracing`)
a line written under a span carries Cloud Logging's trace fields, and each decision off the
straight path is also an event on that span (``processed`` is the span's outcome attribute).
"""

from __future__ import annotations

import bisect
import json
import logging
import math
import sys
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pubsub_toolkit import tracing

LOGGER_NAME = "pubsub_toolkit"
DEAD_LETTERED = "dead_lettered"  # the dead-letter outcome (dead_letters.send.DEAD_LETTERED)
_DECISION_FIELD = "decision"


# Histograms the toolkit records (seconds): how late a delayed message was released, and how
# long a handler ran.
LATENESS = "delay_lateness_seconds"
HANDLER_DURATION = "handler_seconds"
# Bucket upper bounds (seconds) - from a millisecond to an hour - plus an overflow bucket.
BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0, 300.0, 3600.0)


@dataclass(frozen=True)
class Histogram:
    """Observations counted per bucket (``counts[i]`` are <= ``BUCKETS[i]``; the last, more)."""

    counts: tuple[int, ...] = (0,) * (len(BUCKETS) + 1)
    total: float = 0.0

    @property
    def count(self) -> int:
        return sum(self.counts)

    def observed(self, value: float) -> Histogram:
        index = bisect.bisect_left(BUCKETS, value)
        counts = list(self.counts)
        counts[index] += 1
        return Histogram(tuple(counts), self.total + value)

    def quantile(self, q: float) -> float | None:
        """The upper bound of the bucket holding the ``q`` quantile (None when empty)."""
        rank, seen = q * self.count, 0
        for bound, count in zip((*BUCKETS, math.inf), self.counts, strict=True):
            seen += count
            if count and seen >= rank:
                return bound
        return None


class Metrics:
    """Thread-safe named counters (duplicates, mismatches, dead-letters, ...) and histograms
    (:data:`LATENESS`, :data:`HANDLER_DURATION`)."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._histograms: dict[str, Histogram] = {}
        self._observers: tuple[Callable[[str, float], None], ...] = ()
        self._lock = threading.Lock()

    def increment(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self._counts[name] += amount

    def observe(self, name: str, value: float) -> None:
        """Count ``value`` in the histogram ``name``."""
        with self._lock:
            self._histograms[name] = self._histograms.get(name, Histogram()).observed(value)
        for observer in self._observers:  # none unless metrics export is on (metrics.py)
            observer(name, value)

    def add_observer(self, observer: Callable[[str, float], None]) -> None:
        """Also pass every observation to ``observer`` (e.g. an OpenTelemetry histogram)."""
        with self._lock:
            self._observers = (*self._observers, observer)

    def histograms(self) -> dict[str, Histogram]:
        """A copy of every histogram."""
        with self._lock:
            return dict(self._histograms)

    def snapshot(self) -> dict[str, int]:
        """A copy of every counter."""
        with self._lock:
            return dict(self._counts)

    def get(self, name: str) -> int:
        with self._lock:
            return self._counts[name]


class CloudLoggingFormatter(logging.Formatter):
    """Formats records as one-line JSON objects that Cloud Logging parses; under a span (with
    tracing on) with the trace fields that link the line to its trace in ``project``."""

    def __init__(self, project: str | None = None) -> None:
        super().__init__()
        self._project = project

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "severity": record.levelname,
            "message": record.getMessage(),
            "logger": record.name,
            **tracing.log_fields(self._project),
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


def configure_logging(level: int = logging.INFO, *, project: str | None = None) -> None:
    """Send the toolkit's logs to stdout as Cloud Logging JSON (idempotent; for entry points).
    ``project`` (GOOGLE_CLOUD_PROJECT) makes the trace field a full Cloud Trace name."""
    logger = logging.getLogger(LOGGER_NAME)
    if any(isinstance(h.formatter, CloudLoggingFormatter) for h in logger.handlers):
        return
    handler = _StdoutHandler()
    handler.setFormatter(CloudLoggingFormatter(project))
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
        """Record that ``outcome`` was decided for the message with ``dedup_key``; a dead
        letter (``outcome="dead_lettered"`` with a ``reason``) is also counted by reason, as
        ``dead_lettered.{reason}``."""
        self.metrics.increment(outcome)
        reason = fields.get("reason")
        if outcome == DEAD_LETTERED and reason:
            self.metrics.increment(f"{DEAD_LETTERED}.{reason}")
        payload = {"outcome": outcome, "dedup_key": dedup_key, "consumer": self.consumer, **fields}
        tracing.decision_event(outcome, payload)
        self._logger.log(level, message, extra={_DECISION_FIELD: payload})

    def group_decision(
        self,
        outcome: str,
        group: str,
        seq: int,
        text: str,
        *,
        level: int = logging.INFO,
        dedup_key: str | None = None,
        **fields: object,
    ) -> None:
        """:meth:`decision` for a FIFO group's number: the FIFO gate's decision log (its core's
        ``decide``, for the sync and the asyncio gate alike)."""
        self.decision(
            outcome,
            text,
            dedup_key=dedup_key,
            level=level,
            fifo_group=group,
            fifo_seq=seq,
            **fields,
        )
