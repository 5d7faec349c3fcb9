"""The live :class:`~.snapshot.StatusSource`: FIFO state, the dead-letter subscription, the
Cloud Tasks queue and the shared ingress counters, with clients created once and reused on
every refresh. Configuration is the same environment every other command reads."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from pubsub_toolkit.config import Settings, queue_path
from pubsub_toolkit.operations.dashboard.history import WINDOW_MINUTES, BacklogHistory, History
from pubsub_toolkit.operations.dashboard.snapshot import DeadLetterCounts, DedupRate, ScheduledCount
from pubsub_toolkit.operations.group_status import GroupStatus, group_statuses
from pubsub_toolkit.stores.counters.base import SequenceCounter
from pubsub_toolkit.stores.fifo_state.base import FifoStore
from pubsub_toolkit.stores.stats.base import DELIVERIES, DUPLICATES, RELAY_SCOPE, StatsStore

DEFAULT_DEAD_LETTER_SUBSCRIPTION = "dead-letter-sub"
# Counting dead letters means pulling them (Pub/Sub has no count by attribute): stop here and
# show "1000+" rather than hold more messages on every refresh.
DEAD_LETTER_COUNT_LIMIT = 1000
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
    ) -> None:
        """``groups``: groups to show whatever their state (the store lists only those with
        work); the source also keeps showing every group it showed once, while it has a record
        (a status page follows a group to the end of its run)."""
        self.consumer = consumer
        self._named = tuple(groups)
        self._shown: set[str] = set()
        self._backlog = BacklogHistory()
        self._fifo_store = fifo_store
        self._counter = counter
        self._subscriber = subscriber
        self._dead_letter_subscription = dead_letter_subscription
        self._stats = stats
        self._relay_stats = relay_stats
        self._tasks_client = tasks_client
        self._queue = queue

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
        from pubsub_toolkit.emulator import subscriber_client
        from pubsub_toolkit.stores.factory import backend_from_settings

        env = os.environ if env is None else env
        settings = Settings.from_env(env)
        backend = backend_from_settings(settings)  # one client for the three stores
        consumer = consumer or env.get("CONSUMER_ID", "").strip() or "cli"
        subscription = dead_letter_subscription
        if not subscription.startswith("projects/"):
            subscription = f"projects/{settings.project}/subscriptions/{subscription}"
        queue, tasks = None, None
        raw_queue = env.get("TASKS_QUEUE", "").strip()
        if raw_queue:
            from pubsub_toolkit.delay.scheduler import tasks_client

            queue = queue_path(settings.project, env.get("TASKS_LOCATION", ""), raw_queue)
            tasks = tasks_client(env.get("CLOUD_TASKS_EMULATOR_HOST") or None)
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
        self._backlog.record(now, rows)
        # Remember what was shown (bounded): a group that finishes its run stays on the page.
        self._shown = {row.group for row in rows}
        if len(self._shown) > SHOWN_GROUPS:
            self._shown = set(sorted(self._shown)[:SHOWN_GROUPS])
        return rows

    def dead_letters(self) -> DeadLetterCounts:
        from google.api_core import exceptions as gexc

        from pubsub_toolkit.dead_letters.listing import list_dead_letters

        name = self._dead_letter_subscription
        try:
            letters = list_dead_letters(self._subscriber, name, limit=DEAD_LETTER_COUNT_LIMIT)
        except gexc.NotFound:
            return DeadLetterCounts(subscription=name, exists=False)
        reasons = Counter(d.reason for d in letters)
        truncated = len(letters) >= DEAD_LETTER_COUNT_LIMIT
        return DeadLetterCounts(name, True, tuple(sorted(reasons.items())), truncated)

    def scheduled(self) -> ScheduledCount:
        if self._queue is None or self._tasks_client is None:
            return ScheduledCount(queue=None)
        tasks = list(self._tasks_client.list_tasks(parent=self._queue, timeout=10))
        return ScheduledCount(queue=self._queue, waiting=len(tasks))

    def dedup(self) -> DedupRate:
        totals = self._stats.totals()
        return DedupRate(deliveries=totals.get(DELIVERIES, 0), duplicates=totals.get(DUPLICATES, 0))

    def history(self, now: datetime) -> History:
        """The stats store's minute buckets of the last hour, and the backlog this source
        sampled (each :meth:`fifo_groups` call is one sample)."""
        since = now - timedelta(minutes=WINDOW_MINUTES - 1)
        relay = {} if self._relay_stats is None else self._relay_stats.minutes(since, now)
        return History.build(now, self._stats.minutes(since, now), self._backlog.samples, relay)

    def close(self) -> None:
        self._subscriber.close()
