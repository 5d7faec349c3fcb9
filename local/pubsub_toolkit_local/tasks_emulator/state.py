"""The emulator's in-memory state: queues, tasks, and reserved task names.

One lock guards everything. ``changed`` (a condition on that lock) wakes the dispatcher whenever
something it may be waiting for changes: a task added or rescheduled, a queue resumed or
re-limited, a dispatch slot freed. RPC-facing methods take the lock themselves and return copies
of protobufs, because gRPC serialises a response after the lock is released.

Task names stay reserved after a task is deleted, purged, succeeded or given up, for
``name_reservation`` (Cloud Tasks: about an hour), so a named task is never run twice by being
re-created. Reservations are timed with the injected clock, so tests can move time instead of
waiting an hour.

(About 330 lines: every method runs under the one lock described above, so they stay in one
class rather than being split across modules that would each have to know the locking rule.)
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from google.cloud import tasks_v2

from pubsub_toolkit.clock import Clock

from .errors import already_exists, invalid_argument, not_found
from .messages import copy_path, copy_pb, page_of
from .names import (
    QueueName,
    TaskName,
    new_task_id,
    parse_location,
    parse_queue_name,
    parse_task_name,
)
from .policy import Pb, RateLimitPolicy, RetryPolicy, TokenBucket
from .validation import prepare_new_task

logger = logging.getLogger(__name__)

QUEUE_PB = tasks_v2.Queue.pb()
TASK_PB = tasks_v2.Task.pb()
RUNNING = int(tasks_v2.Queue.State.RUNNING)
PAUSED = int(tasks_v2.Queue.State.PAUSED)
BASIC_VIEW = int(tasks_v2.Task.View.BASIC)
FULL_VIEW = int(tasks_v2.Task.View.FULL)

_QUEUE_PAGE = (1000, 9800)  # default and maximum page sizes, as documented
_TASK_PAGE = (1000, 1000)
_UPDATABLE = frozenset(
    {"rate_limits", "retry_config", "stackdriver_logging_config"}
    | {f"rate_limits.{f}" for f in ("max_dispatches_per_second", "max_concurrent_dispatches")}
    | {f"retry_config.{f}" for f in RetryPolicy.__dataclass_fields__}
    | {"stackdriver_logging_config.sampling_ratio", "app_engine_routing_override", "http_target"}
)
_OUTPUT_ONLY = frozenset({"name", "state", "purge_time", "rate_limits.max_burst_size"})


@dataclass(eq=False)
class TaskRecord:
    """A live task: its protobuf plus the bookkeeping the API does not expose."""

    name: TaskName
    pb: Pb
    generation: int = 0  # bumped on every (re)schedule; stale heap entries are skipped
    in_flight: bool = False
    execution_count: int = 0  # attempts answered with a non-5xx status
    previous_response: int | None = None
    first_attempt_at: datetime | None = None


@dataclass(eq=False)
class QueueRecord:
    """A queue, its policies, its tasks and its schedule."""

    name: QueueName
    pb: Pb
    retry: RetryPolicy
    rates: RateLimitPolicy
    bucket: TokenBucket
    tasks: dict[str, TaskRecord] = field(default_factory=dict)  # by task id
    due: list[tuple[int, int, str, int]] = field(default_factory=list)  # heap: µs, seq, id, gen
    in_flight: int = 0

    @property
    def running(self) -> bool:
        """Paused queues keep their tasks but dispatch nothing."""
        return bool(self.pb.state == RUNNING)


class EmulatorState:
    """All queues and tasks of one emulator."""

    def __init__(
        self, *, clock: Clock, name_reservation: timedelta, app_engine_host: str | None
    ) -> None:
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self._clock = clock
        self._name_reservation = name_reservation
        self._app_engine_host = app_engine_host
        self._queues: dict[QueueName, QueueRecord] = {}
        self._reserved: dict[str, datetime] = {}  # task name -> end of its reservation
        self._next_sweep = clock.now()
        self._seq = itertools.count()  # FIFO among tasks due at the same microsecond

    # -- queues -------------------------------------------------------------------------------

    def create_queue(self, parent: str, queue: Pb) -> Pb:
        """CreateQueue: ALREADY_EXISTS if the name is taken."""
        parent = parse_location(parent)
        name = parse_queue_name(queue.name)
        if name.parent != parent:
            raise invalid_argument(f"queue {queue.name} is not in {parent}")
        record = _new_queue(name, queue)
        with self.lock:
            if name in self._queues:
                raise already_exists(f"queue {name} already exists")
            self._queues[name] = record
            logger.info("queue %s created (%s; %s)", name, record.rates, record.retry)
            return copy_pb(QUEUE_PB, record.pb)

    def get_queue(self, name: str) -> Pb:
        """GetQueue."""
        with self.lock:
            return copy_pb(QUEUE_PB, self._queue_locked(name).pb)

    def list_queues(self, parent: str, page_size: int, page_token: str) -> tuple[list[Pb], str]:
        """ListQueues, in name order, paged by the last name returned."""
        parent = parse_location(parent)
        with self.lock:
            by_name = {str(n): q for n, q in self._queues.items() if n.parent == parent}
            page, token = page_of(sorted(by_name), page_size, page_token, *_QUEUE_PAGE)
            return [copy_pb(QUEUE_PB, by_name[n].pb) for n in page], token

    def update_queue(self, queue: Pb, paths: list[str]) -> Pb:
        """UpdateQueue: apply the masked fields (all when the mask is empty); create if absent."""
        name = parse_queue_name(queue.name)
        for path in paths:
            if path not in _UPDATABLE and path not in _OUTPUT_ONLY:
                raise invalid_argument(f"update_mask path {path!r} is not supported")
        with self.lock:
            record = self._queues.get(name)
            if record is None:
                record = self._queues[name] = _new_queue(name, queue)
                logger.info("queue %s created by UpdateQueue", name)
                return copy_pb(QUEUE_PB, record.pb)
            updated = copy_pb(QUEUE_PB, record.pb)
            for path in paths or ["rate_limits", "retry_config", "stackdriver_logging_config"]:
                if path not in _OUTPUT_ONLY:  # output-only fields are ignored, as documented
                    copy_path(queue, updated, path)
            rates = RateLimitPolicy.from_pb(updated.rate_limits)
            retry = RetryPolicy.from_pb(updated.retry_config)
            rates.fill_pb(updated.rate_limits)
            retry.fill_pb(updated.retry_config)
            record.pb, record.rates, record.retry = updated, rates, retry
            record.bucket.reconfigure(
                rates.max_dispatches_per_second, rates.max_burst_size, time.monotonic()
            )
            logger.info("queue %s updated (%s; %s)", name, rates, retry)
            self.changed.notify_all()
            return copy_pb(QUEUE_PB, updated)

    def delete_queue(self, name: str) -> None:
        """DeleteQueue: its tasks go with it; in-flight results are dropped."""
        with self.lock:
            record = self._queue_locked(name)
            del self._queues[record.name]
            record.tasks.clear()
            logger.info("queue %s deleted", record.name)
            self.changed.notify_all()

    def purge_queue(self, name: str) -> Pb:
        """PurgeQueue: delete every task (their names stay reserved)."""
        with self.lock:
            record = self._queue_locked(name)
            purged = list(record.tasks.values())
            for task in purged:
                self.remove_task_locked(record, task, "purged")
            record.due.clear()
            logger.info("queue %s purged (%d tasks)", record.name, len(purged))
            record.pb.purge_time.FromDatetime(datetime.now(UTC))
            return copy_pb(QUEUE_PB, record.pb)

    def set_queue_state(self, name: str, state: int) -> Pb:
        """PauseQueue / ResumeQueue."""
        with self.lock:
            record = self._queue_locked(name)
            record.pb.state = state
            logger.info("queue %s %s", record.name, "resumed" if state == RUNNING else "paused")
            self.changed.notify_all()
            return copy_pb(QUEUE_PB, record.pb)

    # -- tasks --------------------------------------------------------------------------------

    def create_task(self, parent: str, task: Pb, view: int) -> Pb:
        """CreateTask: validate, name (or check the name), store and schedule."""
        queue_name = parse_queue_name(parent)
        pb = copy_pb(TASK_PB, task)
        now = datetime.now(UTC)
        prepare_new_task(pb, now, app_engine_host=self._app_engine_host)
        task_name = parse_task_name(pb.name) if pb.name else None
        if task_name is not None and task_name.queue != queue_name:
            raise invalid_argument(f"task {pb.name} is not in queue {parent}")
        with self.lock:
            record = self._queue_locked(parent)
            if pb.HasField("retry_config"):
                RetryPolicy.from_pb(pb.retry_config, fallback=record.retry)  # validates
            if task_name is None:
                task_name = queue_name.task(new_task_id())
            elif task_name.task_id in record.tasks:
                raise already_exists(f"task {task_name} already exists")
            elif self._is_reserved_locked(str(task_name)):
                raise already_exists(
                    f"task {task_name} existed too recently; its name is reserved for "
                    f"{self._name_reservation} after it ran or was deleted"
                )
            pb.name = str(task_name)
            entry = record.tasks[task_name.task_id] = TaskRecord(task_name, pb)
            self._push_locked(record, entry)
            logger.debug("task %s created, due %s", task_name, pb.schedule_time.ToJsonString())
            return view_copy(pb, view)

    def get_task(self, name: str, view: int) -> Pb:
        """GetTask."""
        with self.lock:
            _, task = self.find_task_locked(name)
            return view_copy(task.pb, view)

    def list_tasks(
        self, parent: str, view: int, page_size: int, page_token: str
    ) -> tuple[list[Pb], str]:
        """ListTasks, in name order, paged by the last name returned."""
        with self.lock:
            record = self._queue_locked(parent)
            by_name = {str(t.name): t for t in record.tasks.values()}
            page, token = page_of(sorted(by_name), page_size, page_token, *_TASK_PAGE)
            return [view_copy(by_name[n].pb, view) for n in page], token

    def delete_task(self, name: str) -> None:
        """DeleteTask (also while it is being dispatched: that attempt's result is dropped)."""
        with self.lock:
            record, task = self.find_task_locked(name)
            self.remove_task_locked(record, task, "deleted", logging.INFO)

    # -- for the dispatcher (caller holds the lock) -------------------------------------------

    def queues_locked(self) -> list[QueueRecord]:
        """The live queues."""
        return list(self._queues.values())

    def find_task_locked(self, name: str) -> tuple[QueueRecord, TaskRecord]:
        """The queue and task named ``name``, or NOT_FOUND."""
        task_name = parse_task_name(name)
        record = self._queue_locked(str(task_name.queue))
        task = record.tasks.get(task_name.task_id)
        if task is None:
            raise not_found(f"task {name}")
        return record, task

    def schedule_locked(self, record: QueueRecord, task: TaskRecord, when: datetime) -> None:
        """Move ``task`` to ``when`` (a retry), invalidating its older schedule entries."""
        task.pb.schedule_time.FromDatetime(when)
        self._push_locked(record, task)

    def remove_task_locked(
        self, record: QueueRecord, task: TaskRecord, reason: str, level: int = logging.DEBUG
    ) -> None:
        """Drop a task for good and reserve its name; log ``reason`` at ``level``."""
        del record.tasks[task.name.task_id]
        now = self._clock.now()
        self._reserved[str(task.name)] = now + self._name_reservation
        if now >= self._next_sweep:  # forget expired reservations now and then
            self._reserved = {n: t for n, t in self._reserved.items() if t > now}
            self._next_sweep = now + timedelta(minutes=1)
        logger.log(
            level, "task %s %s; name reserved for %s", task.name, reason, self._name_reservation
        )
        self.changed.notify_all()

    # -- internals ----------------------------------------------------------------------------

    def _queue_locked(self, name: str) -> QueueRecord:
        record = self._queues.get(parse_queue_name(name))
        if record is None:
            raise not_found(f"queue {name}")
        return record

    def _is_reserved_locked(self, name: str) -> bool:
        until = self._reserved.get(name)
        if until is None:
            return False
        if self._clock.now() >= until:
            del self._reserved[name]
            return False
        return True

    def _push_locked(self, record: QueueRecord, task: TaskRecord) -> None:
        task.generation += 1
        stamp = task.pb.schedule_time
        due_us = stamp.seconds * 1_000_000 + stamp.nanos // 1000
        heapq.heappush(record.due, (due_us, next(self._seq), task.name.task_id, task.generation))
        self.changed.notify_all()


def view_copy(pb: Pb, view: int) -> Pb:
    """A copy of a task for a response: BASIC (the default) omits App Engine bodies."""
    out = copy_pb(TASK_PB, pb)
    out.view = FULL_VIEW if view == FULL_VIEW else BASIC_VIEW
    if out.view == BASIC_VIEW and out.HasField("app_engine_http_request"):
        out.app_engine_http_request.ClearField("body")
    return out


def _new_queue(name: QueueName, source: Pb) -> QueueRecord:
    pb = copy_pb(QUEUE_PB, source)
    pb.name = str(name)
    pb.state = RUNNING
    pb.ClearField("purge_time")
    rates = RateLimitPolicy.from_pb(pb.rate_limits)
    retry = RetryPolicy.from_pb(pb.retry_config)
    rates.fill_pb(pb.rate_limits)
    retry.fill_pb(pb.retry_config)
    if pb.HasField("http_target") or pb.HasField("app_engine_routing_override"):
        logger.warning("queue %s: queue-level routing is stored but not applied", name)
    bucket = TokenBucket(rates.max_dispatches_per_second, rates.max_burst_size, time.monotonic())
    return QueueRecord(name, pb, retry, rates, bucket)
