"""Flush in-process counters to a shared stats store, off the message path.

The store is a :class:`~pubsub_toolkit.stores.stats.base.StatsStore` on the configured backend.

Messages only bump :class:`~pubsub_toolkit.observability.Metrics` (a lock and a dict update). A
daemon thread wakes every ``interval`` seconds, takes a snapshot, and adds the difference from
what it last flushed - one store write per interval, however many messages passed. A failed
write is simply retried with the accumulated delta next time (counts are never lost or doubled
by a failure that raised; a write that succeeded but reported failure could double one delta -
acceptable for a dashboard figure).

On Cloud Functions / Cloud Run with CPU throttled between requests, the thread only runs while
requests are served; under load that is all the time, and when idle the last interval's counts
are flushed with the next request.
"""

from __future__ import annotations

import logging
import threading

from pubsub_toolkit.observability import Metrics
from pubsub_toolkit.stores.stats.base import StatsStore

logger = logging.getLogger(__name__)


class CounterFlusher:
    """Adds ``metrics``' growth to ``store`` every ``interval`` seconds, in a daemon thread."""

    def __init__(self, metrics: Metrics, store: StatsStore, *, interval: float = 5.0) -> None:
        if interval <= 0:
            raise ValueError("interval must be > 0 seconds")
        self._metrics = metrics
        self._store = store
        self._interval = interval
        self._flushed: dict[str, int] = {}
        self._flush_lock = threading.Lock()  # one flush at a time (thread vs explicit flush)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> CounterFlusher:
        """Start the background thread (idempotent); returns self."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="stats-flusher", daemon=True)
            self._thread.start()
        return self

    def flush(self) -> dict[str, int]:
        """Write what grew since the last successful flush; return the deltas written."""
        with self._flush_lock:
            current = self._metrics.snapshot()
            deltas = {
                name: value - self._flushed.get(name, 0)
                for name, value in current.items()
                if value != self._flushed.get(name, 0)
            }
            if deltas:
                self._store.add(deltas)
                self._flushed = current  # only after the write: a failure keeps the delta
            return deltas

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread and flush what is left."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.flush()

    def _loop(self) -> None:
        while not self._stopping.wait(self._interval):
            try:
                self.flush()
            except Exception:
                # The dashboard figure may lag; the message path is never affected.
                logger.warning("stats flush failed; retrying next interval", exc_info=True)
