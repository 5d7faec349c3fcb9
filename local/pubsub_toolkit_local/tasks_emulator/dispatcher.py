"""The dispatcher: starts each task's attempts on time, within the queue's limits.

One scheduler thread sleeps on the state's condition until the earliest moment something can be
dispatched (the head of a queue's schedule, or the next token of its rate limiter) or until the
state changes; it never polls. A task is dispatched only once the wall clock has reached its
``schedule_time`` (compared in integer microseconds), so it never runs early.

Every attempt runs in its own thread (at most ``max_concurrent_dispatches`` per queue), so a slow
target never holds up another task. ``stop()`` aborts in-flight HTTP calls by shutting their
sockets down, then joins every thread it started.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

import grpc
from google.rpc import code_pb2

from .errors import ApiError
from .http_dispatch import AttemptInfo, HttpCall, Outcome, app_engine_request, http_target_request
from .policy import Pb, RetryPolicy
from .state import EmulatorState, QueueRecord, TaskRecord, view_copy

logger = logging.getLogger(__name__)


class Dispatcher:
    """Runs the attempts of every task in an :class:`EmulatorState`."""

    def __init__(
        self,
        state: EmulatorState,
        *,
        sign: Callable[[str, str], str],
        app_engine_host: str | None,
        allow_remote_targets: bool,
    ) -> None:
        self._state = state
        self._sign = sign
        self._app_engine_host = app_engine_host
        self._allow_remote = allow_remote_targets
        self._calls: dict[HttpCall, threading.Thread] = {}  # in flight; guarded by state.lock
        self._closing = False
        self._scheduler = threading.Thread(
            target=self._run, name="tasks-emulator-scheduler", daemon=True
        )

    def start(self) -> None:
        """Start the scheduler thread."""
        self._scheduler.start()

    def stop(self, timeout: float) -> bool:
        """Stop scheduling, abort in-flight calls, join all threads; False if one lingers."""
        with self._state.changed:
            self._closing = True
            in_flight = list(self._calls.items())
            self._state.changed.notify_all()
        for call, _ in in_flight:
            call.abort()
        deadline = time.monotonic() + timeout
        threads = [self._scheduler] if self._scheduler.ident is not None else []
        threads += [thread for _, thread in in_flight]
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        lingering = [t.name for t in threads if t.is_alive()]
        if lingering:
            logger.warning("threads still running after stop: %s", ", ".join(lingering))
        return not lingering

    def run_task(self, name: str, view: int) -> Pb:
        """RunTask: dispatch now, even if the queue is paused or out of tokens.

        A task already being dispatched is returned as is rather than sent a second time.
        """
        with self._state.changed:
            if self._closing:
                raise ApiError(grpc.StatusCode.UNAVAILABLE, "the emulator is stopping")
            record, task = self._state.find_task_locked(name)
            if not task.in_flight:
                task.generation += 1  # its scheduled entry is now stale
                self._begin_locked(record, task)
            return view_copy(task.pb, view)

    # -- scheduler ----------------------------------------------------------------------------

    def _run(self) -> None:
        with self._state.changed:
            while not self._closing:
                try:
                    timeout = self._dispatch_due_locked()
                except Exception:  # keep dispatching the other tasks; this one is logged
                    logger.exception("the scheduler failed to start an attempt")
                    timeout = 0.1  # try again soon, without spinning
                self._state.changed.wait(timeout)

    def _dispatch_due_locked(self) -> float | None:
        """Start every attempt that may start now; return seconds until the next may, or None."""
        now_us = time.time_ns() // 1000
        now_mono = time.monotonic()
        waits = [
            self._dispatch_queue_locked(q, now_us, now_mono) for q in self._state.queues_locked()
        ]
        return min((w for w in waits if w is not None), default=None)

    def _dispatch_queue_locked(
        self, record: QueueRecord, now_us: int, now_mono: float
    ) -> float | None:
        due = record.due
        while due:
            due_us, _, task_id, generation = due[0]
            task = record.tasks.get(task_id)
            if task is None or task.generation != generation or task.in_flight:
                heapq.heappop(due)  # deleted, rescheduled or run by RunTask since
                continue
            if not record.running:
                return None  # ResumeQueue notifies
            if due_us > now_us:
                return (due_us - now_us) / 1e6
            if record.in_flight >= record.rates.max_concurrent_dispatches:
                return None  # a finishing attempt notifies
            wait = record.bucket.take(now_mono)
            if wait > 0:
                return wait
            heapq.heappop(due)
            self._begin_locked(record, task)
        return None

    # -- attempts -----------------------------------------------------------------------------

    def _begin_locked(self, record: QueueRecord, task: TaskRecord) -> None:
        pb = task.pb
        now = datetime.now(UTC)
        info = AttemptInfo(
            queue_id=record.name.queue_id,
            task_id=task.name.task_id,
            retry_count=pb.dispatch_count,
            execution_count=task.execution_count,
            eta=pb.schedule_time.ToDatetime(tzinfo=UTC),
            previous_response=task.previous_response,
        )
        timeout = pb.dispatch_deadline.ToTimedelta().total_seconds()
        if pb.HasField("http_request"):
            request = http_target_request(pb.http_request, info, timeout, self._sign)
        else:
            assert self._app_engine_host is not None  # CreateTask refuses otherwise
            request = app_engine_request(
                pb.app_engine_http_request, info, timeout, self._app_engine_host
            )
        task.in_flight = True
        record.in_flight += 1
        pb.dispatch_count += 1
        if task.first_attempt_at is None:
            task.first_attempt_at = now
            pb.first_attempt.dispatch_time.FromDatetime(now)
        pb.ClearField("last_attempt")
        pb.last_attempt.schedule_time.CopyFrom(pb.schedule_time)
        pb.last_attempt.dispatch_time.FromDatetime(now)
        call = HttpCall(request, allow_remote=self._allow_remote)
        thread = threading.Thread(
            target=self._attempt,
            args=(record, task, call),
            name=f"tasks-emulator-dispatch-{task.name.task_id[:40]}",
            daemon=True,
        )
        self._calls[call] = thread
        try:
            thread.start()
        except RuntimeError:  # no thread to be had: count a failed attempt, free the slot
            del self._calls[call]
            failed = Outcome(None, code_pb2.RESOURCE_EXHAUSTED, "no thread for the dispatch")
            self._finish_locked(record, task, failed)
            raise
        logger.debug(
            "dispatching %s (attempt %d): %s %s",
            task.name,
            pb.dispatch_count,
            request.method,
            request.url,
        )

    def _attempt(self, record: QueueRecord, task: TaskRecord, call: HttpCall) -> None:
        try:
            outcome = call.run()
        except Exception:  # a bug here must not kill the thread silently or leak the slot
            logger.exception("dispatch of %s failed inside the emulator", task.name)
            outcome = Outcome(None, code_pb2.INTERNAL, "emulator error")
        with self._state.changed:
            del self._calls[call]
            self._finish_locked(record, task, outcome)
            self._state.changed.notify_all()

    def _finish_locked(self, record: QueueRecord, task: TaskRecord, outcome: Outcome) -> None:
        record.in_flight -= 1
        task.in_flight = False
        if outcome.aborted:
            return
        if record.tasks.get(task.name.task_id) is not task:
            logger.info(
                "%s was deleted during its attempt; result %s dropped", task.name, outcome.message
            )
            return
        pb = task.pb
        now = datetime.now(UTC)
        if outcome.status is not None:
            pb.last_attempt.response_time.FromDatetime(now)
            pb.response_count += 1
            if outcome.status < 500:  # X-CloudTasks-TaskExecutionCount leaves out 5xx answers
                task.execution_count += 1
        task.previous_response = outcome.status
        pb.last_attempt.response_status.code = outcome.code
        pb.last_attempt.response_status.message = outcome.message
        if outcome.succeeded:
            self._state.remove_task_locked(record, task, f"succeeded ({outcome.message})")
            return
        policy = record.retry
        if pb.HasField("retry_config"):
            policy = RetryPolicy.from_pb(pb.retry_config, fallback=record.retry)
        first = task.first_attempt_at or now
        if policy.exhausted(pb.dispatch_count, first, now):
            reason = f"given up after {pb.dispatch_count} attempts (last: {outcome.message})"
            self._state.remove_task_locked(record, task, reason, logging.WARNING)
            return
        delay = policy.backoff(pb.dispatch_count)
        self._state.schedule_locked(record, task, now + delay)
        logger.info(
            "attempt %d of %s failed (%s); retry in %.3f s",
            pb.dispatch_count,
            task.name,
            outcome.message,
            delay.total_seconds(),
        )
