"""Where the status page reads figures that only the platform keeps: :class:`PipelineMetrics`.

Pub/Sub has no cheap "how many are waiting" call, Cloud Tasks none but listing every task, and
the consumer's counters live in its own processes. In production Cloud Monitoring holds all of
them: ``pubsub.googleapis.com/subscription/num_undelivered_messages`` and
``.../oldest_unacked_message_age`` per subscription, ``cloudtasks.googleapis.com/queue/depth``,
and - with ``PUBSUB_TOOLKIT_METRICS_EXPORTER=cloud-monitoring`` on the consumer - the toolkit's own
``workload.googleapis.com/pubsub_toolkit.decisions`` and ``.handler.duration``.
:class:`CloudMonitoring` reads them through the Monitoring REST API (google-auth's
``AuthorizedSession``: no new dependency), one small request per figure with a timeout and
``pageSize`` bound. The emulators have no Monitoring API: :class:`NoMonitoring` says so, and the
card shows that sentence instead of a figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from pubsub_toolkit.attributes import format_time

# The consumer's decisions that are failures (the handler raised, or the message left the path).
ERROR_OUTCOMES = frozenset(
    {"handler_failed", "retrying", "dead_lettered", "blocked", "retry_later_unscheduled"}
)
CONSUMER_WINDOW = timedelta(minutes=15)  # error rate and latency are over this window
MONITORING_TIMEOUT_S = 2.0
_API = "https://monitoring.googleapis.com/v3"
NO_MONITORING = "not available on the emulator (no Cloud Monitoring)"


class NotAvailable(Exception):
    """A figure this deployment does not have; the message is shown on the card as is."""


@dataclass(frozen=True)
class SubscriptionBacklog:
    """One subscription's backlog: messages not yet acked and the oldest one's age."""

    role: str  # "origin" or "final"
    subscription: str  # the short name
    undelivered: int | None
    oldest_unacked_s: float | None


@dataclass(frozen=True)
class ConsumerHealth:
    """The consumers' decisions over the last ``window``: liveness, error rate, latency."""

    window: timedelta
    last_decision_at: datetime | None  # the newest minute with a decision (None: none)
    decisions: int
    errors: int
    handler_p50_s: float | None
    handler_p99_s: float | None

    @property
    def error_rate(self) -> float | None:
        return self.errors / self.decisions if self.decisions else None


class PipelineMetrics(Protocol):
    """Platform figures for the status page; each method may raise :class:`NotAvailable`."""

    def backlog(self, role: str, subscription: str, now: datetime) -> SubscriptionBacklog: ...

    def queue_depth(self, queue_id: str, now: datetime) -> int: ...

    def undelivered(self, subscription: str, now: datetime) -> int: ...

    def consumer(self, now: datetime) -> ConsumerHealth: ...


class NoMonitoring:
    """The local stack: the emulators keep no metrics."""

    def __init__(self, why: str = NO_MONITORING) -> None:
        self.why = why

    def backlog(self, role: str, subscription: str, now: datetime) -> SubscriptionBacklog:
        raise NotAvailable(self.why)

    def queue_depth(self, queue_id: str, now: datetime) -> int:
        raise NotAvailable(self.why)

    def undelivered(self, subscription: str, now: datetime) -> int:
        raise NotAvailable(self.why)

    def consumer(self, now: datetime) -> ConsumerHealth:
        if self.why != NO_MONITORING:
            raise NotAvailable(self.why)
        raise NotAvailable(
            "not recorded locally: the consumer's counters stay in its process "
            "(PUBSUB_TOOLKIT_METRICS_EXPORTER=cloud-monitoring exports them in production)"
        )


class CloudMonitoring:
    """Figures from the Monitoring API's ``timeSeries.list``, one bounded request each."""

    def __init__(
        self,
        project: str,
        session: Any,
        *,
        timeout: float = MONITORING_TIMEOUT_S,
        api: str = _API,
    ) -> None:
        """``session``: a ``google.auth.transport.requests.AuthorizedSession`` (any
        ``requests.Session`` for ``api`` elsewhere)."""
        self._project = project
        self._session = session
        self._timeout = timeout
        self._api = api.rstrip("/")

    @classmethod
    def from_default_credentials(cls, project: str) -> CloudMonitoring:
        import google.auth
        from google.auth.transport.requests import AuthorizedSession

        scopes = ["https://www.googleapis.com/auth/monitoring.read"]
        credentials, _ = google.auth.default(scopes=scopes)
        return cls(project, AuthorizedSession(credentials))  # type: ignore[no-untyped-call]

    def backlog(self, role: str, subscription: str, now: datetime) -> SubscriptionBacklog:
        where = f'resource.label.subscription_id="{subscription}"'
        return SubscriptionBacklog(
            role,
            subscription,
            self._latest("pubsub.googleapis.com/subscription/num_undelivered_messages", where, now),
            self._latest(
                "pubsub.googleapis.com/subscription/oldest_unacked_message_age", where, now
            ),
        )

    def queue_depth(self, queue_id: str, now: datetime) -> int:
        where = f'resource.label.queue_id="{queue_id}"'
        depth = self._latest("cloudtasks.googleapis.com/queue/depth", where, now)
        if depth is None:
            raise NotAvailable("no queue depth reported in the last 10 min")
        return depth

    def undelivered(self, subscription: str, now: datetime) -> int:
        where = f'resource.label.subscription_id="{subscription}"'
        found = self._latest(
            "pubsub.googleapis.com/subscription/num_undelivered_messages", where, now
        )
        if found is None:
            raise NotAvailable("no backlog reported in the last 10 min")
        return found

    def consumer(self, now: datetime) -> ConsumerHealth:
        decisions = self._series(
            "workload.googleapis.com/pubsub_toolkit.decisions",
            'metric.label.component="consumer"',
            now - CONSUMER_WINDOW,
            now,
            {
                "aggregation.alignmentPeriod": "60s",
                "aggregation.perSeriesAligner": "ALIGN_DELTA",
                "aggregation.crossSeriesReducer": "REDUCE_SUM",
                "aggregation.groupByFields": "metric.label.outcome",
            },
        )
        total = errors = 0
        newest: datetime | None = None
        for series in decisions:
            outcome = series.get("metric", {}).get("labels", {}).get("outcome", "")
            for point in series.get("points", ()):
                count = int(_number(point) or 0)
                total += count
                errors += count if outcome in ERROR_OUTCOMES else 0
                if count:
                    end = _parse(point["interval"]["endTime"])
                    newest = end if newest is None or end > newest else newest
        return ConsumerHealth(
            CONSUMER_WINDOW, newest, total, errors, self._handler(now, 50), self._handler(now, 99)
        )

    def _handler(self, now: datetime, percentile: int) -> float | None:
        seconds = int(CONSUMER_WINDOW.total_seconds())
        series = self._series(
            "workload.googleapis.com/pubsub_toolkit.handler.duration",
            'metric.label.component="consumer"',
            now - CONSUMER_WINDOW,
            now,
            {
                "aggregation.alignmentPeriod": f"{seconds}s",
                "aggregation.perSeriesAligner": "ALIGN_DELTA",
                "aggregation.crossSeriesReducer": f"REDUCE_PERCENTILE_{percentile:02d}",
            },
        )
        points = [p for s in series for p in s.get("points", ())]
        return _number(points[0]) if points else None

    def _latest(self, metric: str, where: str, now: datetime) -> int | None:
        """The newest point of a gauge over the last 10 minutes (the API reports each minute)."""
        series = self._series(
            metric,
            where,
            now - timedelta(minutes=10),
            now,
            {"aggregation.alignmentPeriod": "60s", "aggregation.perSeriesAligner": "ALIGN_MAX"},
        )
        points = [p for s in series for p in s.get("points", ())[:1]]  # newest first
        values = [_number(p) for p in points]
        present = [int(v) for v in values if v is not None]
        return max(present) if present else None

    def _series(
        self, metric: str, where: str, start: datetime, end: datetime, aggregation: dict[str, str]
    ) -> list[dict[str, Any]]:
        params = {
            "filter": f'metric.type="{metric}" AND {where}',
            "interval.startTime": format_time(start),
            "interval.endTime": format_time(end),
            "pageSize": "20",  # bounded: a handful of series at most
            **aggregation,
        }
        response = self._session.get(
            f"{self._api}/projects/{self._project}/timeSeries", params=params, timeout=self._timeout
        )
        if response.status_code != 200:
            raise NotAvailable(
                f"Cloud Monitoring answered {response.status_code}: {response.text[:200]}"
            )
        series: list[dict[str, Any]] = response.json().get("timeSeries", [])
        return series


def _number(point: dict[str, Any]) -> float | None:
    value = point.get("value", {})
    for kind in ("int64Value", "doubleValue"):
        if kind in value:
            return float(value[kind])
    return None


def _parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
