"""A model of Cloud Tasks, and the scheduler every ingress and relay process uses with it.

:class:`CloudTasks` is the queue service:

* **named tasks**: creating a name that exists - or that ran or was deleted less than an hour
  ago (Cloud Tasks keeps names reserved) - is refused (``AlreadyExists``);
* **at-least-once execution** at the schedule time by the service's own clock (skewed from true
  time, so a task may fire a few seconds early or late), sometimes twice;
* **retries** with exponential backoff (0.1 s doubling to 1 h) while the relay fails, for at
  most 100 attempts (then the task is dropped - a loss the checker would report); each run
  tells the relay its attempt number (the retry count header), and the relay knows the
  queue's ``max_attempts`` (``Relay(task_max_attempts=...)``);
* **delete** returns False for a task that is absent, already ran, or was deleted.

:class:`TasksView` is our own scheduler protocol (``schedule(message, deliver_at, dedup_key,
hop=0)``, ``delete(dedup_key, hop=0)``) implemented on that model the way
:class:`pubsub_toolkit.delay.scheduler.CloudTasksScheduler` implements it on the real client:
both plan each task with the real ``plan_task`` (same body, same names, same limits).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pubsub_toolkit.delay.scheduler import plan_task, task_id
from pubsub_toolkit.errors import PermanentError
from pubsub_toolkit.message import OutboundMessage
from tests.simulation.clock import SimClock, to_seconds
from tests.simulation.events import EventLoop
from tests.simulation.faults import Faults
from tests.simulation.tracing import Trace

QUEUE = "projects/sim/locations/here/queues/delays"
NAME_RESERVED_SECONDS = 3600.0
MAX_TASK_ATTEMPTS = 100


@dataclass
class _Task:
    """One task as the service keeps it (mutable: the service's own state)."""

    name: str
    body: bytes
    schedule_time: float  # seconds since the epoch, by the service's clock
    state: str = "scheduled"  # scheduled | done | deleted | failed
    attempts: int = 0
    ended_at: float = 0.0


# run the task's body (name, 1-based attempt number); True when answered 2xx
Executor = Callable[[bytes, str, int], bool]


# Cloud Tasks refuses a task scheduled further ahead than this (InvalidArgument).
MAX_SCHEDULE_SECONDS = 30 * 86_400


class TaskRejected(ValueError):
    """Cloud Tasks refused the task (InvalidArgument): a permanent error for the caller."""


class CloudTasks:
    """The queue: tasks by name, dispatched on virtual time to ``execute``."""

    def __init__(
        self,
        loop: EventLoop,
        rng: random.Random,
        faults: Faults,
        trace: Trace,
        *,
        skew: float,
        execute: Executor,
    ) -> None:
        self._loop = loop
        self._rng = rng
        self._faults = faults
        self._trace = trace
        self._skew = skew  # the service's clock minus true time
        self._execute = execute
        self._tasks: dict[str, _Task] = {}

    def create(self, name: str, body: bytes, schedule_time: datetime) -> bool:
        """Create a task; False if the name is taken (AlreadyExists). A schedule time more
        than 30 days past the service's clock is refused (InvalidArgument), as Cloud Tasks
        does: :class:`TaskRejected`."""
        now = self._loop.now
        if to_seconds(schedule_time) > now + self._skew + MAX_SCHEDULE_SECONDS:
            raise TaskRejected(f"{name}: schedule time beyond 30 days")
        existing = self._tasks.get(name)
        if existing is not None and (
            existing.state == "scheduled" or now < existing.ended_at + NAME_RESERVED_SECONDS
        ):
            return False
        task = _Task(name, body, to_seconds(schedule_time))
        self._tasks[name] = task
        self._dispatch_later(task, max(0.0, task.schedule_time - self._skew - now), False)
        return True

    def delete(self, name: str) -> bool:
        task = self._tasks.get(name)
        if task is None or task.state != "scheduled":
            return False
        task.state, task.ended_at = "deleted", self._loop.now
        return True

    def failed(self) -> list[str]:
        """Names of tasks dropped after too many failed attempts."""
        return [t.name for t in self._tasks.values() if t.state == "failed"]

    def _dispatch_later(self, task: _Task, delay: float, duplicate: bool, attempt: int = 0) -> None:
        latency = self._rng.uniform(0.01, 1.0)
        label = f"task {task.name[-8:]}{' (duplicate)' if duplicate else ''}"
        self._loop.after(delay + latency, label, lambda: self._dispatch(task, duplicate, attempt))

    def _dispatch(self, task: _Task, duplicate: bool, attempt: int = 0) -> None:
        """Run ``task``; a duplicate run carries the attempt number of the run it copies (the
        service's retry count header), and is no attempt of its own."""
        if self._tasks.get(task.name) is not task or task.state == "deleted":
            return
        if task.state != "scheduled" and not duplicate:
            return
        if not duplicate:
            task.attempts += 1
            attempt = task.attempts
        if self._faults.duplicate_task():
            self._dispatch_later(task, self._rng.uniform(0.1, 10.0), True, attempt)
        answered = self._execute(task.body, task.name, attempt)
        if duplicate or task.state != "scheduled":
            return
        if answered:
            task.state, task.ended_at = "done", self._loop.now
        elif task.attempts >= MAX_TASK_ATTEMPTS:
            task.state, task.ended_at = "failed", self._loop.now
            self._trace.add(f"tasks: {task.name[-8:]} dropped after {task.attempts} attempts")
        else:
            backoff = min(3600.0, 0.1 * 2 ** (task.attempts - 1))
            self._dispatch_later(task, backoff, False)


def task_name(dedup_key: str, hop: int = 0, fifo_seq: str | None = None) -> str:
    """The real scheduler's task name (its own task_id: key, FIFO number, hop)."""
    return f"{QUEUE}/tasks/{task_id(dedup_key, hop, fifo_seq)}"


class TasksView:
    """One process's scheduler on the Cloud Tasks model (our ``Scheduler`` protocol)."""

    queue = QUEUE

    def __init__(self, service: CloudTasks, clock: SimClock, call: Callable[..., Any]) -> None:
        self._service = service
        self._clock = clock
        self._call = call  # the boundary: call(op, apply) injects faults

    def task_name(self, dedup_key: str, hop: int = 0, fifo_seq: str | None = None) -> str:
        return task_name(dedup_key, hop, fifo_seq)

    def schedule(
        self, message: OutboundMessage, deliver_at: datetime, dedup_key: str, hop: int = 0
    ) -> str:
        """Park ``message`` until ``deliver_at`` (or the horizon); return the task name."""
        plan = plan_task(message, deliver_at, dedup_key, hop, now=self._clock.now())
        name = f"{QUEUE}/tasks/{plan.task_id}"
        try:
            self._call(
                "tasks.create", lambda: self._service.create(name, plan.body, plan.schedule_time)
            )
        except TaskRejected as exc:  # as CloudTasksScheduler maps InvalidArgument
            raise PermanentError(
                "schedule_rejected", f"Cloud Tasks rejected the task: {exc}"
            ) from exc
        return name  # created, or AlreadyExists: "already scheduled" either way

    def delete(self, dedup_key: str, hop: int = 0) -> bool:
        name = task_name(dedup_key, hop)
        return bool(self._call("tasks.delete", lambda: self._service.delete(name)))
