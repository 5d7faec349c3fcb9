"""The live :class:`~.snapshot.StatusSource`: FIFO state, the dead-letter subscription, the
Cloud Tasks queue, the shared ingress counters and the platform's metrics
(:mod:`.monitoring`), with clients created once and reused on every refresh. Configuration is
the same environment every other command reads.

Every read is bounded, whatever the backlog: dead letters are counted by Cloud Monitoring where
it exists and their reasons taken from a sample of at most :data:`DEAD_LETTER_SAMPLE` (one pull,
released at once); the Cloud Tasks queue's depth likewise, or (the local stack) one page of at
most :data:`TASKS_PAGE` tasks, shown as "≥ N" when there are more; FIFO groups as the store
lists them (only groups with work), at most :data:`SHOWN_GROUPS` remembered.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from pubsub_toolkit.config import Settings, queue_path
from pubsub_toolkit.stores.counters.base import SequenceCounter
from pubsub_toolkit.stores.fifo_state.base import FifoStore
from pubsub_toolkit.stores.stats.base import DELIVERIES, DUPLICATES, RELAY_SCOPE, StatsStore
from pubsub_toolkit_cli.dashboard.cards import Part, describe
from pubsub_toolkit_cli.dashboard.history import WINDOW_MINUTES, BacklogHistory, History
from pubsub_toolkit_cli.dashboard.monitoring import (
    CloudMonitoring,
    ConsumerHealth,
    NoMonitoring,
    NotAvailable,
    PipelineMetrics,
)
from pubsub_toolkit_cli.dashboard.snapshot import (
    DeadLetterCounts,
    DedupRate,
    ScheduledCount,
    StoreHealth,
)
from pubsub_toolkit_cli.group_status import GroupStatus, group_statuses

logger = logging.getLogger(__name__)

DEFAULT_DEAD_LETTER_SUBSCRIPTION = "dead-letter-sub"
# Reasons come from pulling (Pub/Sub has no count by attribute): a sample this big at most,
# released at once; the count itself comes from Cloud Monitoring, or is "≥ N" locally.
DEAD_LETTER_SAMPLE = 100
TASKS_PAGE = 100  # tasks listed (locally, where there is no queue depth metric): one page
# The subscriptions whose backlog the page shows: ingress's push subscription on origin and the
# consumers' pull subscription on final (the names the Terraform module and local stack use).
DEFAULT_ORIGIN_SUBSCRIPTION = "origin-to-ingress"
DEFAULT_FINAL_SUBSCRIPTION = "final-sub"
_BACKENDS = {
    "groups": "store",
    "dedup": "store",
    "history": "store",
    "store": "store",
    "dead_letters": "Pub/Sub",
    "scheduled": "Cloud Tasks",
    "consumers": "Cloud Monitoring",
}
SHOWN_GROUPS = 200  # groups a status page keeps showing after the store stopped listing them


class LiveStatusSource:
    """Reads the running pipeline; one instance serves every refresh of the page."""

    def __init__(
        self,
        *,
        consumer: str,
        fifo_store: FifoStore,
        counter: SequenceCounter,
        subscriber: Any,
        dead_letter_subscription: str,
        stats: StatsStore,
        relay_stats: StatsStore | None = None,
        tasks_client: Any | None,
        queue: str | None,
        groups: Sequence[str] = (),
        metrics: PipelineMetrics | None = None,
        store_backend: str = "store",
        subscriptions: Sequence[tuple[str, str]] = (),
    ) -> None:
        """``groups``: groups to show whatever their state (the store lists only those with
        work); the source also keeps showing every group it showed once, while it has a record
        (a status page follows a group to the end of its run). ``metrics``: the platform's
        figures (default: none, as on the emulators); ``subscriptions``: ``(role, name)`` of
        the subscriptions whose backlog is shown."""
        self.consumer = consumer
        self._named = tuple(groups)
        self._shown: set[str] = set()
        self._backlog = BacklogHistory()
        self._backlog_lock = threading.Lock()  # groups and history are read in parallel
        self._fifo_store = fifo_store
        self._counter = counter
        self._subscriber = subscriber
        self._dead_letter_subscription = dead_letter_subscription
        self._stats = stats
        self._relay_stats = relay_stats
        self._tasks_client = tasks_client
        self._queue = queue
        self._metrics = metrics or NoMonitoring()
        self._store_backend = store_backend
        self._subscriptions = tuple(subscriptions)

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        consumer: str | None = None,
        dead_letter_subscription: str = DEFAULT_DEAD_LETTER_SUBSCRIPTION,
        groups: Sequence[str] = (),
    ) -> LiveStatusSource:
        """Clients for the pipeline ``env`` describes (default ``os.environ``)."""
        from pubsub_toolkit.stores.factory import backend_from_settings
        from pubsub_toolkit_cli.emulator import subscriber_client

        env = os.environ if env is None else env
        settings = Settings.from_env(env)
        backend = backend_from_settings(settings)  # one client for the three stores
        consumer = consumer or env.get("PUBSUB_TOOLKIT_CONSUMER_ID", "").strip() or "cli"
        subscription = dead_letter_subscription
        if not subscription.startswith("projects/"):
            subscription = f"projects/{settings.project}/subscriptions/{subscription}"
        queue, tasks = None, None
        raw_queue = env.get("PUBSUB_TOOLKIT_TASKS_QUEUE", "").strip()
        if raw_queue:
            from pubsub_toolkit.delay.scheduler import tasks_client

            queue = queue_path(
                settings.project, env.get("PUBSUB_TOOLKIT_TASKS_LOCATION", ""), raw_queue
            )
            tasks = tasks_client(env.get("CLOUD_TASKS_EMULATOR_HOST") or None)
        metrics: PipelineMetrics = NoMonitoring()
        if not env.get("PUBSUB_EMULATOR_HOST"):
            try:
                metrics = CloudMonitoring.from_default_credentials(settings.project)
            except Exception as exc:  # no credentials: those cards say so, the rest draws
                # One line, no traceback: `status` promises one error line, and the cards
                # below say the same where the page shows it.
                logger.warning("Cloud Monitoring unavailable to the status page: %s", describe(exc))
                metrics = NoMonitoring(f"Cloud Monitoring unavailable: {describe(exc)}")
        roles = (
            (
                "origin",
                env.get("PUBSUB_TOOLKIT_ORIGIN_SUBSCRIPTION", "") or DEFAULT_ORIGIN_SUBSCRIPTION,
            ),
            (
                "final",
                env.get("PUBSUB_TOOLKIT_FINAL_SUBSCRIPTION", "") or DEFAULT_FINAL_SUBSCRIPTION,
            ),
        )
        return cls(
            consumer=consumer,
            fifo_store=backend.fifo_store(),
            counter=backend.counter(),
            subscriber=subscriber_client(),  # dead letters can be 10 MB
            dead_letter_subscription=subscription,
            stats=backend.stats_store(),
            relay_stats=backend.stats_store(scope=RELAY_SCOPE),
            tasks_client=tasks,
            queue=queue,
            groups=groups,
            metrics=metrics,
            store_backend=settings.store_backend,
            subscriptions=tuple((role, name.rsplit("/", 1)[-1].strip()) for role, name in roles),
        )

    def fifo_groups(self, now: datetime) -> list[GroupStatus]:
        rows = group_statuses(
            self._fifo_store,
            self.consumer,
            now=now,
            counter=self._counter,
            named=self._named,
            remembered=self._shown,
        )
        with self._backlog_lock:
            self._backlog.record(now, rows)
        # Remember what was shown (bounded): a group that finishes its run stays on the page.
        self._shown = {row.group for row in rows}
        if len(self._shown) > SHOWN_GROUPS:
            self._shown = set(sorted(self._shown)[:SHOWN_GROUPS])
        return rows

    def dead_letters(self, now: datetime) -> DeadLetterCounts:
        from google.api_core import exceptions as gexc

        from pubsub_toolkit_cli.dead_letters.listing import list_dead_letters

        name = self._dead_letter_subscription
        try:
            counted: int | None = self._metrics.undelivered(name.rsplit("/", 1)[-1], now)
        except NotAvailable:
            counted = None  # the sample is all there is (the local stack)
        try:
            letters = list_dead_letters(self._subscriber, name, limit=DEAD_LETTER_SAMPLE)
        except gexc.NotFound:
            return DeadLetterCounts(subscription=name, exists=False)
        reasons = Counter(d.reason for d in letters)
        truncated = len(letters) >= DEAD_LETTER_SAMPLE
        return DeadLetterCounts(name, True, tuple(sorted(reasons.items())), truncated, counted)

    def scheduled(self, now: datetime) -> ScheduledCount:
        if self._queue is None or self._tasks_client is None:
            return ScheduledCount(queue=None)
        try:
            return ScheduledCount(self._queue, self._metrics.queue_depth(self._queue_id, now))
        except NotAvailable:
            pass  # no depth metric (the local stack): one bounded page of the listing
        pages = self._tasks_client.list_tasks(
            request={"parent": self._queue, "page_size": TASKS_PAGE}, timeout=5
        ).pages
        first = next(iter(pages), None)
        if first is None:
            return ScheduledCount(self._queue, 0)
        tasks = list(first.tasks)[:TASKS_PAGE]
        more = bool(first.next_page_token) or len(tasks) >= TASKS_PAGE
        return ScheduledCount(self._queue, len(tasks), at_least=more)

    @property
    def _queue_id(self) -> str:
        return (self._queue or "").rsplit("/", 1)[-1]

    def store(self, now: datetime) -> StoreHealth:
        """A one-minute read of the stats store: does the backend answer at all?"""
        self._stats.minutes(now, now)
        return StoreHealth(self._store_backend)

    def backlogs(self, now: datetime) -> tuple[Part, ...]:
        def read(role: str, name: str) -> Part:
            return Part("Cloud Monitoring", lambda: self._metrics.backlog(role, name, now))

        return tuple(read(role, name) for role, name in self._subscriptions)

    def consumers(self, now: datetime) -> ConsumerHealth:
        return self._metrics.consumer(now)

    def backend(self, part: str) -> str:
        return _BACKENDS.get(part, part)

    def dedup(self) -> DedupRate:
        totals = self._stats.totals()
        return DedupRate(deliveries=totals.get(DELIVERIES, 0), duplicates=totals.get(DUPLICATES, 0))

    def history(self, now: datetime) -> History:
        """The stats store's minute buckets of the last hour, and the backlog this source
        sampled (each :meth:`fifo_groups` call is one sample)."""
        since = now - timedelta(minutes=WINDOW_MINUTES - 1)
        relay = {} if self._relay_stats is None else self._relay_stats.minutes(since, now)
        with self._backlog_lock:
            samples = {group: dict(minutes) for group, minutes in self._backlog.samples.items()}
        return History.build(now, self._stats.minutes(since, now), samples, relay)

    def close(self) -> None:
        self._subscriber.close()
