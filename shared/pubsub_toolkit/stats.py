"""Flush in-process counters to a shared stats store, off the message path.

The store is a :class:`~pubsub_toolkit.stores.stats.base.StatsStore` on the configured backend.

Messages only bump :class:`~pubsub_toolkit.observability.Metrics` (a lock and a dict update). A
daemon thread wakes every ``interval`` seconds, takes a snapshot, and adds the difference from
what it last flushed - one store write per interval, however many messages passed. A failed
write is simply retried with the accumulated delta next time (counts are never lost or doubled
by a failure that raised; a write that succeeded but reported failure could double one delta -
acceptable for a dashboard figure).

The same write also adds the deltas to the current minute's bucket (the status page's charts of
the last hour), with the histograms' bucket deltas (``delay_lateness_seconds.bucket.3``, ...)
in the minute only: a flush is still one write - Redis one ``MULTI`` round trip, Firestore one
batch commit of two documents - whose size is the number of counters and histogram buckets that
changed. Counts land in the minute of the flush, so with the default 5 s interval a count may
show in the minute after the one it happened in.

On Cloud Functions / Cloud Run with CPU throttled between requests, the thread only runs while
requests are served; under load that is all the time, and when idle the last interval's counts
are flushed with the next request.
"""

from __future__ import annotations

import logging
import threading

from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.observability import Metrics
from pubsub_toolkit.stores.stats.base import BUCKET_MARK, StatsStore, minute_of

logger = logging.getLogger(__name__)


def histogram_counters(metrics: Metrics) -> dict[str, int]:
    """Every histogram's bucket counts as counters named ``{histogram}.bucket.{i}``."""
    return {
        f"{name}{BUCKET_MARK}{i}": count
        for name, histogram in metrics.histograms().items()
        for i, count in enumerate(histogram.counts)
        if count
    }


class CounterFlusher:
    """Adds ``metrics``' growth to ``store`` every ``interval`` seconds, in a daemon thread."""

    def __init__(
        self,
        metrics: Metrics,
        store: StatsStore,
        *,
        interval: float = 5.0,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if interval <= 0:
            raise ValueError("interval must be > 0 seconds")
        self._metrics = metrics
        self._store = store
        self._interval = interval
        self._clock = clock
        self._flushed: dict[str, int] = {}
        self._flushed_buckets: dict[str, int] = {}
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
        """Write what grew since the last successful flush; return the deltas written (the
        counters' and the histogram buckets')."""
        with self._flush_lock:
            current = self._metrics.snapshot()
            buckets = histogram_counters(self._metrics)
            deltas = _grown(current, self._flushed)
            bucket_deltas = _grown(buckets, self._flushed_buckets)
            if deltas or bucket_deltas:
                self._store.add(
                    deltas, {**deltas, **bucket_deltas}, minute=minute_of(self._clock.now())
                )
                # Only after the write: a failure keeps the delta for the next flush.
                self._flushed, self._flushed_buckets = current, buckets
            return {**deltas, **bucket_deltas}

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


def _grown(current: dict[str, int], flushed: dict[str, int]) -> dict[str, int]:
    return {
        name: value - flushed.get(name, 0)
        for name, value in current.items()
        if value != flushed.get(name, 0)
    }
