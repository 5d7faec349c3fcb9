"""The local Cloud Tasks emulator, driven by the official client against real local HTTP targets.

Every test talks gRPC through ``tasks_v2.CloudTasksClient`` and receives dispatches on a
``ThreadingHTTPServer`` bound to 127.0.0.1. Synchronisation is always a condition with a
deadline (``Target.wait_for`` or ``wait_until``), never a sleep standing in for it.
"""

from __future__ import annotations

import itertools
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.api_core import exceptions
from google.auth.transport.requests import Request
from google.cloud import tasks_v2
from google.cloud.tasks_v2.services.cloud_tasks.transports import CloudTasksGrpcTransport
from google.oauth2 import id_token
from google.protobuf import field_mask_pb2
from google.rpc import code_pb2

import pubsub_toolkit_local.tasks_emulator as tasks_emulator_package
from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit_local.oidc import LocalOidcIssuer
from pubsub_toolkit_local.tasks_emulator import CloudTasksEmulator
from pubsub_toolkit_local.tasks_emulator.policy import RetryPolicy
from tests.support.waiting import wait_until

PARENT = "projects/demo-project/locations/us-central1"
SERVICE_ACCOUNT = "tasks-invoker@demo-project.iam.gserviceaccount.com"


# -- local HTTP targets ----------------------------------------------------------------------


@dataclass(frozen=True)
class Arrival:
    """One request a target received."""

    at: float  # time.time() when the request arrived
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: bytes


class Target:
    """A loopback HTTP endpoint that records every request and answers ``respond(arrival)``."""

    def __init__(self, respond: Callable[[Arrival], int] | None = None) -> None:
        self.respond = respond or (lambda _arrival: 200)
        self.arrivals: list[Arrival] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._cond = threading.Condition()
        target = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                arrival = Arrival(
                    at=time.time(),
                    method=self.command,
                    path=self.path,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=self.rfile.read(length),
                )
                with target._cond:
                    target.arrivals.append(arrival)
                    target.in_flight += 1
                    target.max_in_flight = max(target.max_in_flight, target.in_flight)
                    target._cond.notify_all()
                try:
                    status = target.respond(arrival)
                finally:
                    with target._cond:
                        target.in_flight -= 1
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # the emulator hung up on purpose (deadline, stop): not a test failure

        self._server = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def wait_for(self, count: int, timeout: float = 5.0) -> list[Arrival]:
        """The arrivals once there are at least ``count``; fail after ``timeout``."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.arrivals) >= count, timeout):
                raise AssertionError(f"{len(self.arrivals)} of {count} requests in {timeout}s")
            return list(self.arrivals)

    def nothing_arrives_within(self, seconds: float) -> bool:
        """True if no request arrives for ``seconds`` (a bounded wait on the condition)."""
        with self._cond:
            count = len(self.arrivals)
            return not self._cond.wait_for(lambda: len(self.arrivals) > count, seconds)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


# -- fixtures and helpers --------------------------------------------------------------------


def connect(address: str) -> tasks_v2.CloudTasksClient:
    """The official client, over an insecure channel to the emulator."""
    channel = grpc.insecure_channel(address)
    return tasks_v2.CloudTasksClient(transport=CloudTasksGrpcTransport(channel=channel))


@pytest.fixture
def make_emulator() -> Iterator[
    Callable[..., tuple[CloudTasksEmulator, tasks_v2.CloudTasksClient]]
]:
    """Start emulators (with the given options) and connected clients; stop them at teardown."""
    started: list[tuple[CloudTasksEmulator, tasks_v2.CloudTasksClient]] = []

    def make(**options: Any) -> tuple[CloudTasksEmulator, tasks_v2.CloudTasksClient]:
        emulator = CloudTasksEmulator(**options)
        client = connect(emulator.start())
        started.append((emulator, client))
        return emulator, client

    yield make
    for emulator, client in started:
        client.transport.close()
        emulator.stop()


@pytest.fixture
def client(
    make_emulator: Callable[..., tuple[CloudTasksEmulator, tasks_v2.CloudTasksClient]],
) -> tasks_v2.CloudTasksClient:
    """A client of a default emulator."""
    return make_emulator()[1]


@pytest.fixture
def make_target() -> Iterator[Callable[..., Target]]:
    targets: list[Target] = []

    def make(respond: Callable[[Arrival], int] | None = None) -> Target:
        targets.append(Target(respond))
        return targets[-1]

    yield make
    for target in targets:
        target.close()


def make_queue(client: tasks_v2.CloudTasksClient, queue_id: str, **fields: Any) -> tasks_v2.Queue:
    return client.create_queue(
        parent=PARENT, queue=tasks_v2.Queue(name=f"{PARENT}/queues/{queue_id}", **fields)
    )


def http_task(url: str, **fields: Any) -> tasks_v2.Task:
    return tasks_v2.Task(http_request=tasks_v2.HttpRequest(url=url), **fields)


def is_gone(client: tasks_v2.CloudTasksClient, name: str) -> bool:
    try:
        client.get_task(name=name)
    except exceptions.NotFound:
        return True
    return False


def fast_retries(**fields: Any) -> tasks_v2.RetryConfig:
    """A retry config with a short max_backoff unless told otherwise."""
    return tasks_v2.RetryConfig(**{"max_backoff": timedelta(seconds=10), **fields})


# -- queues ----------------------------------------------------------------------------------


def test_queue_crud_and_error_codes(client: tasks_v2.CloudTasksClient) -> None:
    queue = make_queue(client, "crud")
    assert queue.state == tasks_v2.Queue.State.RUNNING
    assert queue.rate_limits.max_dispatches_per_second == 500  # Cloud Tasks' defaults, filled in
    assert queue.retry_config.max_attempts == 100
    assert client.get_queue(name=queue.name).name == queue.name
    with pytest.raises(exceptions.AlreadyExists):
        make_queue(client, "crud")
    with pytest.raises(exceptions.NotFound):
        client.get_queue(name=f"{PARENT}/queues/missing")
    with pytest.raises(exceptions.InvalidArgument):
        make_queue(client, "bad_name!")  # queue ids allow letters, digits and hyphens only
    with pytest.raises(exceptions.InvalidArgument):
        client.create_queue(
            parent=PARENT, queue=tasks_v2.Queue(name="projects/other/locations/x/queues/q")
        )
    with pytest.raises(exceptions.InvalidArgument):
        client.get_queue(name="queues/crud")

    for queue_id in ("crud-b", "crud-c"):
        make_queue(client, queue_id)
    pages = list(client.list_queues(request={"parent": PARENT, "page_size": 2}).pages)
    assert [len(p.queues) for p in pages] == [2, 1]
    assert [q.name.rsplit("/", 1)[1] for p in pages for q in p.queues] == [
        "crud",
        "crud-b",
        "crud-c",
    ]
    assert list(client.list_queues(parent="projects/demo-project/locations/elsewhere")) == []

    client.delete_queue(name=queue.name)
    with pytest.raises(exceptions.NotFound):
        client.get_queue(name=queue.name)
    with pytest.raises(exceptions.NotFound):
        client.delete_queue(name=queue.name)


def test_update_pause_resume(client: tasks_v2.CloudTasksClient) -> None:
    queue = make_queue(client, "update")
    update = tasks_v2.Queue(
        name=queue.name,
        rate_limits=tasks_v2.RateLimits(max_dispatches_per_second=5, max_concurrent_dispatches=2),
        retry_config=tasks_v2.RetryConfig(max_attempts=3, min_backoff=timedelta(seconds=2)),
    )
    updated = client.update_queue(
        queue=update, update_mask=field_mask_pb2.FieldMask(paths=["rate_limits", "retry_config"])
    )
    assert updated.rate_limits.max_dispatches_per_second == 5
    assert updated.rate_limits.max_concurrent_dispatches == 2
    assert updated.rate_limits.max_burst_size == 5  # derived, output only
    assert updated.retry_config.max_attempts == 3
    assert updated.retry_config.min_backoff == timedelta(seconds=2)
    assert updated.retry_config.max_doublings == 16  # unset in the update: the default

    # Only the masked field changes.
    narrow = tasks_v2.Queue(
        name=queue.name, rate_limits=tasks_v2.RateLimits(max_dispatches_per_second=7)
    )
    mask = field_mask_pb2.FieldMask(paths=["rate_limits.max_dispatches_per_second"])
    updated = client.update_queue(queue=narrow, update_mask=mask)
    assert updated.rate_limits.max_dispatches_per_second == 7
    assert updated.rate_limits.max_concurrent_dispatches == 2
    assert client.get_queue(name=queue.name).retry_config.max_attempts == 3

    too_fast = tasks_v2.Queue(
        name=queue.name, rate_limits=tasks_v2.RateLimits(max_dispatches_per_second=501)
    )
    with pytest.raises(exceptions.InvalidArgument):
        client.update_queue(queue=too_fast)
    with pytest.raises(exceptions.InvalidArgument):
        client.update_queue(queue=narrow, update_mask=field_mask_pb2.FieldMask(paths=["bogus"]))

    assert client.pause_queue(name=queue.name).state == tasks_v2.Queue.State.PAUSED
    assert client.get_queue(name=queue.name).state == tasks_v2.Queue.State.PAUSED
    assert client.resume_queue(name=queue.name).state == tasks_v2.Queue.State.RUNNING
    with pytest.raises(exceptions.NotFound):
        client.pause_queue(name=f"{PARENT}/queues/missing")


def test_paused_queue_holds_tasks_and_purge_deletes_them(
    client: tasks_v2.CloudTasksClient, make_target: Callable[..., Target]
) -> None:
    target = make_target()
    queue = make_queue(client, "purge")
    client.pause_queue(name=queue.name)
    for task_id in ("p1", "p2", "p3"):
        client.create_task(
            parent=queue.name, task=http_task(target.url, name=f"{queue.name}/tasks/{task_id}")
        )
    assert target.nothing_arrives_within(0.3), "a paused queue dispatched"
    assert len(list(client.list_tasks(parent=queue.name))) == 3

    purged = client.purge_queue(name=queue.name)
    assert purged.purge_time is not None
    assert list(client.list_tasks(parent=queue.name)) == []
    client.resume_queue(name=queue.name)
    with pytest.raises(exceptions.AlreadyExists):  # purged names stay reserved
        client.create_task(
            parent=queue.name, task=http_task(target.url, name=f"{queue.name}/tasks/p1")
        )
    client.create_task(parent=queue.name, task=http_task(target.url + "/after-purge"))
    arrivals = target.wait_for(1)
    assert [a.path for a in arrivals] == ["/after-purge"]

    # Resuming releases what a pause held back.
    client.pause_queue(name=queue.name)
    client.create_task(parent=queue.name, task=http_task(target.url + "/held"))
    assert target.nothing_arrives_within(0.2)
    client.resume_queue(name=queue.name)
    assert target.wait_for(2)[-1].path == "/held"


# -- tasks -----------------------------------------------------------------------------------


def test_get_list_delete_run_task(
    client: tasks_v2.CloudTasksClient, make_target: Callable[..., Target]
) -> None:
    target = make_target()
    queue = make_queue(client, "tasks")
    later = datetime.now(UTC) + timedelta(hours=1)
    names = [f"{queue.name}/tasks/t{i}" for i in range(5)]
    for name in names:
        client.create_task(
            parent=queue.name, task=http_task(target.url, name=name, schedule_time=later)
        )

    pages = list(client.list_tasks(request={"parent": queue.name, "page_size": 2}).pages)
    assert [len(p.tasks) for p in pages] == [2, 2, 1]
    assert [t.name for p in pages for t in p.tasks] == names

    task = client.get_task(name=names[2])
    assert task.schedule_time == later
    assert task.create_time is not None
    assert task.dispatch_deadline == timedelta(minutes=10)  # Cloud Tasks' default
    assert task.dispatch_count == 0
    assert task.response_count == 0
    assert task.view == tasks_v2.Task.View.BASIC

    client.delete_task(name=names[0])
    with pytest.raises(exceptions.NotFound):
        client.get_task(name=names[0])
    with pytest.raises(exceptions.NotFound):
        client.delete_task(name=names[0])

    # RunTask dispatches now, whatever the schedule says.
    ran = client.run_task(name=names[1])
    assert ran.dispatch_count == 1
    arrival = target.wait_for(1)[0]
    assert arrival.headers["x-cloudtasks-taskname"] == "t1"
    wait_until(lambda: is_gone(client, names[1]), timeout=5, interval=0.01, what="t1 deleted")
    with pytest.raises(exceptions.NotFound):
        client.run_task(name=names[1])
    assert [t.name for t in client.list_tasks(parent=queue.name)] == names[2:]

    # Unnamed tasks get a generated name.
    unnamed = client.create_task(parent=queue.name, task=http_task(target.url, schedule_time=later))
    prefix, task_id = unnamed.name.rsplit("/", 1)
    assert prefix == f"{queue.name}/tasks"
    assert task_id.isdigit()
    with pytest.raises(exceptions.NotFound):
        client.create_task(parent=f"{PARENT}/queues/missing", task=http_task(target.url))


def test_create_task_validation(client: tasks_v2.CloudTasksClient) -> None:
    queue = make_queue(client, "validation")
    url = "http://127.0.0.1:9/unused"
    invalid = [
        tasks_v2.Task(),  # no target
        http_task("ftp://127.0.0.1/x"),
        http_task(url, name=f"{PARENT}/queues/other/tasks/t1"),  # not in the parent queue
        http_task(url, name=f"{queue.name}/tasks/has space"),
        http_task(url, schedule_time=datetime.now(UTC) + timedelta(days=31)),
        http_task(url, dispatch_deadline=timedelta(hours=1)),  # HTTP maximum: 30 min
        tasks_v2.Task(
            http_request=tasks_v2.HttpRequest(
                url=url, http_method=tasks_v2.HttpMethod.GET, body=b"x"
            )
        ),
        tasks_v2.Task(http_request=tasks_v2.HttpRequest(url=url, body=b"x" * (1024 * 1024 + 1))),
    ]
    for task in invalid:
        with pytest.raises(exceptions.InvalidArgument):
            client.create_task(parent=queue.name, task=task)
    app_engine = tasks_v2.Task(app_engine_http_request=tasks_v2.AppEngineHttpRequest())
    with pytest.raises(exceptions.FailedPrecondition):  # no app_engine_host configured
        client.create_task(parent=queue.name, task=app_engine)
    assert list(client.list_tasks(parent=queue.name)) == []


def test_named_tasks_are_deduplicated_and_names_stay_reserved(
    make_emulator: Callable[..., tuple[CloudTasksEmulator, tasks_v2.CloudTasksClient]],
    make_target: Callable[..., Target],
) -> None:
    reservation = timedelta(seconds=1)
    _, client = make_emulator(name_reservation=reservation)
    target = make_target()
    queue = make_queue(client, "dedup")
    later = datetime.now(UTC) + timedelta(hours=1)
    deleted = http_task(
        target.url + "/deleted", name=f"{queue.name}/tasks/order-1", schedule_time=later
    )
    ran = http_task(target.url + "/ran", name=f"{queue.name}/tasks/order-2")

    client.create_task(parent=queue.name, task=deleted)
    with pytest.raises(exceptions.AlreadyExists):
        client.create_task(parent=queue.name, task=deleted)
    client.delete_task(name=deleted.name)
    deleted_at = time.monotonic()

    client.create_task(parent=queue.name, task=ran)
    target.wait_for(1)
    wait_until(lambda: is_gone(client, ran.name), timeout=5, interval=0.01, what="ran task deleted")
    ran_at = time.monotonic()

    for task in (deleted, ran):  # within the window: refused
        with pytest.raises(exceptions.AlreadyExists):
            client.create_task(parent=queue.name, task=task)

    def accepted(task: tasks_v2.Task) -> bool:
        try:
            client.create_task(parent=queue.name, task=task)
        except exceptions.AlreadyExists:
            return False
        return True

    wait_until(lambda: accepted(deleted), timeout=5, interval=0.02, what="deleted name released")
    assert time.monotonic() - deleted_at >= reservation.total_seconds() * 0.95
    wait_until(lambda: accepted(ran), timeout=5, interval=0.02, what="ran name released")
    assert time.monotonic() - ran_at >= reservation.total_seconds() * 0.95 - 0.05


def test_name_reservation_follows_the_injected_clock(
    make_emulator: Callable[..., tuple[CloudTasksEmulator, tasks_v2.CloudTasksClient]],
) -> None:
    clock = ManualClock()
    _, client = make_emulator(clock=clock)  # default window: one hour, as in Cloud Tasks
    queue = make_queue(client, "clock")
    task = http_task(
        "http://127.0.0.1:9/x",
        name=f"{queue.name}/tasks/once",
        schedule_time=datetime.now(UTC) + timedelta(hours=1),
    )
    client.create_task(parent=queue.name, task=task)
    client.delete_task(name=task.name)
    clock.advance(timedelta(minutes=59))
    with pytest.raises(exceptions.AlreadyExists):
        client.create_task(parent=queue.name, task=task)
    clock.advance(timedelta(minutes=2))
    assert client.create_task(parent=queue.name, task=task).name == task.name


# -- dispatch --------------------------------------------------------------------------------


def test_schedule_time_is_respected_never_early(
    client: tasks_v2.CloudTasksClient, make_target: Callable[..., Target]
) -> None:
    target = make_target()
    queue = make_queue(client, "schedule")
    now = datetime.now(UTC)
    offsets = {"c": 1.0, "b": 0.7, "a": 0.4}  # created last-due-first: the order must not matter
    due = {}
    for task_id, offset in offsets.items():
        due[task_id] = now + timedelta(seconds=offset)
        client.create_task(
            parent=queue.name,
            task=http_task(target.url + f"/{task_id}", schedule_time=due[task_id]),
        )
    arrivals = target.wait_for(3)
    assert [a.path for a in arrivals] == ["/a", "/b", "/c"]
    for arrival in arrivals:
        eta = due[arrival.path[1:]].timestamp()
        lateness = arrival.at - eta
        assert lateness >= 0, f"{arrival.path} dispatched {-lateness:.6f}s early"
        assert lateness < 0.3, f"{arrival.path} dispatched {lateness:.3f}s late"
        assert float(arrival.headers["x-cloudtasks-tasketa"]) == pytest.approx(eta, abs=1e-6)


def test_retries_back_off_then_succeed(
    client: tasks_v2.CloudTasksClient, make_target: Callable[..., Target]
) -> None:
    answers = iter([500, 500, 200])
    target = make_target(lambda _arrival: next(answers))
    retry = fast_retries(max_attempts=5, min_backoff=timedelta(seconds=0.2), max_doublings=4)
    queue = make_queue(client, "retry", retry_config=retry)
    task = client.create_task(parent=queue.name, task=http_task(target.url))

    arrivals = target.wait_for(3)
    wait_until(lambda: is_gone(client, task.name), timeout=5, interval=0.01, what="task deleted")
    assert len(target.arrivals) == 3  # deleted after the success: no fourth attempt
    first_gap = arrivals[1].at - arrivals[0].at
    second_gap = arrivals[2].at - arrivals[1].at
    assert first_gap >= 0.2
    assert second_gap >= 0.4  # doubled
    assert second_gap > first_gap
    assert [a.headers["x-cloudtasks-taskretrycount"] for a in arrivals] == ["0", "1", "2"]
    # Executions leave out 5xx answers, as documented for X-CloudTasks-TaskExecutionCount.
    assert [a.headers["x-cloudtasks-taskexecutioncount"] for a in arrivals] == ["0", "0", "0"]
    previous = [a.headers.get("x-cloudtasks-taskpreviousresponse") for a in arrivals]
    assert previous == [None, "500", "500"]


def test_max_attempts_respected_then_task_deleted(
    client: tasks_v2.CloudTasksClient, make_target: Callable[..., Target]
) -> None:
    target = make_target(lambda _arrival: 503)
    retry = fast_retries(max_attempts=3, min_backoff=timedelta(seconds=0.05))
    queue = make_queue(client, "give-up", retry_config=retry)
    task = http_task(target.url + "/queue-config", name=f"{queue.name}/tasks/doomed")
    # A task-level retry_config overrides the queue's.
    once = http_task(
        target.url + "/task-config",
        name=f"{queue.name}/tasks/once",
        retry_config=tasks_v2.RetryConfig(max_attempts=1),
    )
    for created in (task, once):
        client.create_task(parent=queue.name, task=created)
    target.wait_for(4)
    for name in (task.name, once.name):
        wait_until(lambda n=name: is_gone(client, n), timeout=5, interval=0.01, what=f"{name} gone")
    paths = [a.path for a in target.arrivals]
    assert (paths.count("/queue-config"), paths.count("/task-config")) == (3, 1)
    with pytest.raises(exceptions.AlreadyExists):  # an exhausted task's name stays reserved
        client.create_task(parent=queue.name, task=task)


def test_backoff_and_give_up_follow_the_documented_rules() -> None:
    # RetryConfig.max_doublings' documented example: 10 s min, 300 s max, 3 doublings.
    policy = RetryPolicy(
        min_backoff=timedelta(seconds=10), max_backoff=timedelta(seconds=300), max_doublings=3
    )
    delays = [policy.backoff(failures).total_seconds() for failures in range(1, 9)]
    assert delays == [10, 20, 40, 80, 160, 240, 300, 300]

    start = datetime(2030, 1, 1, tzinfo=UTC)
    later = start + timedelta(minutes=10)
    by_count = RetryPolicy(max_attempts=3)
    assert not by_count.exhausted(2, start, later)
    assert by_count.exhausted(3, start, start)
    # Both limits set: retrying stops only once both are reached.
    both = RetryPolicy(max_attempts=3, max_retry_duration=timedelta(minutes=5))
    assert not both.exhausted(5, start, start + timedelta(minutes=4))
    assert not both.exhausted(2, start, later)
    assert both.exhausted(3, start, later)
    forever = RetryPolicy(max_attempts=-1)
    assert not forever.exhausted(10_000, start, start + timedelta(days=30))


def test_attempt_results_and_dispatch_deadline(
    client: tasks_v2.CloudTasksClient, make_target: Callable[..., Target]
) -> None:
    release = threading.Event()

    def respond(arrival: Arrival) -> int:
        if arrival.path == "/slow":
            release.wait(5)  # answers long after the task's deadline
        return 404

    target = make_target(respond)
    retry = fast_retries(min_backoff=timedelta(seconds=60), max_backoff=timedelta(seconds=60))
    queue = make_queue(client, "deadline", retry_config=retry)
    slow = client.create_task(
        parent=queue.name,
        task=http_task(target.url + "/slow", dispatch_deadline=timedelta(seconds=0.5)),
    )
    missing = client.create_task(parent=queue.name, task=http_task(target.url + "/missing"))
    try:
        target.wait_for(2)
        started = time.monotonic()

        def attempted(name: str) -> tasks_v2.Task | None:
            task = client.get_task(name=name)
            return task if task.last_attempt.response_status.code else None

        timed_out = wait_until(lambda: attempted(slow.name), timeout=3, interval=0.01)
        assert timed_out is not None
        assert time.monotonic() - started < 2.5  # the deadline, not the target, ended it
        assert timed_out.last_attempt.response_status.code == code_pb2.DEADLINE_EXCEEDED
        assert timed_out.dispatch_count == 1
        assert timed_out.response_count == 0
        assert timed_out.first_attempt.dispatch_time is not None
        assert timed_out.schedule_time > datetime.now(UTC) + timedelta(seconds=50)  # backoff

        answered = wait_until(lambda: attempted(missing.name), timeout=3, interval=0.01)
        assert answered is not None
        assert answered.last_attempt.response_status.code == code_pb2.NOT_FOUND
        assert answered.last_attempt.response_status.message == "HTTP 404"
        assert answered.last_attempt.response_time is not None
        assert (answered.dispatch_count, answered.response_count) == (1, 1)
    finally:
        release.set()


def test_connection_errors_fail_attempts_and_remote_hosts_are_refused(
    client: tasks_v2.CloudTasksClient,
) -> None:
    with socket.socket() as probe:  # a loopback port with nothing listening once closed
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    retry = fast_retries(min_backoff=timedelta(seconds=60), max_backoff=timedelta(seconds=60))
    queue = make_queue(client, "unreachable", retry_config=retry)
    refused = client.create_task(
        parent=queue.name, task=http_task(f"http://127.0.0.1:{closed_port}/x")
    )
    remote = client.create_task(parent=queue.name, task=http_task("http://192.0.2.1/x"))

    def status_code(name: str) -> int:
        return int(client.get_task(name=name).last_attempt.response_status.code)

    wait_until(lambda: status_code(refused.name), timeout=5, interval=0.01, what="attempt")
    wait_until(lambda: status_code(remote.name), timeout=5, interval=0.01, what="attempt")
    assert status_code(refused.name) == code_pb2.UNAVAILABLE
    assert status_code(remote.name) == code_pb2.PERMISSION_DENIED  # never leaves loopback
    for name in (refused.name, remote.name):
        task = client.get_task(name=name)
        assert (task.dispatch_count, task.response_count) == (1, 0)


def test_slow_target_does_not_block_other_tasks(
    client: tasks_v2.CloudTasksClient, make_target: Callable[..., Target]
) -> None:
    release = threading.Event()

    def respond(arrival: Arrival) -> int:
        if arrival.path == "/slow":
            release.wait(3)  # a 3 s handler (cut short at the end of the test)
        return 200

    target = make_target(respond)
    queue = make_queue(client, "slow")
    due = datetime.now(UTC) + timedelta(seconds=0.2)
    try:
        for path in ("/slow", "/fast"):
            client.create_task(
                parent=queue.name, task=http_task(target.url + path, schedule_time=due)
            )
        arrivals = target.wait_for(2, timeout=2)
        assert {a.path for a in arrivals} == {"/slow", "/fast"}
        assert max(a.at for a in arrivals) - due.timestamp() < 0.5
        assert not release.is_set()  # the slow one was still in flight
        assert target.in_flight == 1
    finally:
        release.set()


def test_max_dispatches_per_second(
    client: tasks_v2.CloudTasksClient, make_target: Callable[..., Target]
) -> None:
    rate, count = 5.0, 15
    target = make_target()
    queue = make_queue(
        client, "rate", rate_limits=tasks_v2.RateLimits(max_dispatches_per_second=rate)
    )
    burst = queue.rate_limits.max_burst_size
    assert 1 <= burst <= rate
    for _ in range(count):
        client.create_task(parent=queue.name, task=http_task(target.url))
    times = [a.at for a in target.wait_for(count, timeout=10)]
    # A token bucket lets `burst` through at once, then one per 1/rate seconds.
    lower_bound = (count - burst) / rate
    assert times[-1] - times[0] >= lower_bound - 0.05
    for start in times:  # no one-second window holds more than a burst plus a second's tokens
        assert sum(start <= t < start + 1.0 for t in times) <= burst + rate + 1


def test_max_concurrent_dispatches(
    client: tasks_v2.CloudTasksClient, make_target: Callable[..., Target]
) -> None:
    def respond(_arrival: Arrival) -> int:
        time.sleep(0.1)  # the target's own work keeps each dispatch in flight for a while
        return 200

    target = make_target(respond)
    queue = make_queue(
        client, "serial", rate_limits=tasks_v2.RateLimits(max_concurrent_dispatches=1)
    )
    for _ in range(5):
        client.create_task(parent=queue.name, task=http_task(target.url))
    arrivals = target.wait_for(5)
    assert target.max_in_flight == 1
    assert all(b.at - a.at >= 0.09 for a, b in itertools.pairwise(arrivals))


def test_http_target_request_and_headers(
    client: tasks_v2.CloudTasksClient, make_target: Callable[..., Target]
) -> None:
    target = make_target()
    queue = make_queue(client, "headers")
    body = json.dumps({"hello": "world"}).encode()
    request = tasks_v2.HttpRequest(
        url=target.url + "/hook?x=1",
        http_method=tasks_v2.HttpMethod.PUT,
        headers={
            "Content-Type": "application/json",
            "X-Custom": "kept",
            "User-Agent": "replaced",
            "X-AppEngine-QueueName": "spoofed",  # reserved for Google: dropped
        },
        body=body,
    )
    task = client.create_task(
        parent=queue.name, task=tasks_v2.Task(name=f"{queue.name}/tasks/h1", http_request=request)
    )
    arrival = target.wait_for(1)[0]
    assert (arrival.method, arrival.path, arrival.body) == ("PUT", "/hook?x=1", body)
    headers = arrival.headers
    assert headers["content-type"] == "application/json"
    assert headers["x-custom"] == "kept"
    assert headers["user-agent"] == "Google-Cloud-Tasks"
    assert headers["x-cloudtasks-queuename"] == "headers"
    assert headers["x-cloudtasks-taskname"] == "h1"
    assert headers["x-cloudtasks-taskretrycount"] == "0"
    assert headers["x-cloudtasks-taskexecutioncount"] == "0"
    assert float(headers["x-cloudtasks-tasketa"]) == pytest.approx(
        task.schedule_time.timestamp(), abs=1e-6
    )
    assert "x-cloudtasks-taskpreviousresponse" not in headers
    assert "x-appengine-queuename" not in headers
    assert "authorization" not in headers


def test_oidc_token_verifies_with_google_auth(
    make_emulator: Callable[..., tuple[CloudTasksEmulator, tasks_v2.CloudTasksClient]],
    make_target: Callable[..., Target],
) -> None:
    with LocalOidcIssuer() as issuer:
        _, client = make_emulator(oidc_issuer=issuer)
        target = make_target()
        queue = make_queue(client, "oidc")
        default_audience = target.url + "/relay"
        explicit_audience = "https://relay.example.com/tasks"
        for audience in ("", explicit_audience):
            token = tasks_v2.OidcToken(service_account_email=SERVICE_ACCOUNT, audience=audience)
            request = tasks_v2.HttpRequest(url=default_audience, oidc_token=token)
            client.create_task(parent=queue.name, task=tasks_v2.Task(http_request=request))
        arrivals = target.wait_for(2)
        tokens = {}
        for arrival in arrivals:
            scheme, _, jwt = arrival.headers["authorization"].partition(" ")
            assert scheme == "Bearer"
            claims = id_token.verify_token(jwt, Request(), certs_url=issuer.certs_url)
            tokens[claims["aud"]] = jwt
            assert claims["email"] == SERVICE_ACCOUNT
            assert claims["iss"] == "https://accounts.google.com"
        assert set(tokens) == {default_audience, explicit_audience}  # default: the target URL
        for audience, jwt in tokens.items():
            for certs_url in (issuer.certs_url, issuer.jwks_url):
                claims = id_token.verify_token(
                    jwt, Request(), audience=audience, certs_url=certs_url
                )
                assert claims["email_verified"] is True
        with pytest.raises(ValueError):
            id_token.verify_token(
                tokens[explicit_audience],
                Request(),
                audience=default_audience,
                certs_url=issuer.certs_url,
            )


def test_app_engine_target(
    make_emulator: Callable[..., tuple[CloudTasksEmulator, tasks_v2.CloudTasksClient]],
    make_target: Callable[..., Target],
) -> None:
    target = make_target()
    _, client = make_emulator(app_engine_host=target.url)
    queue = make_queue(client, "appengine")
    request = tasks_v2.AppEngineHttpRequest(
        relative_uri="/_ah/relay?x=1", headers={"X-Custom": "kept"}, body=b"payload"
    )
    later = datetime.now(UTC) + timedelta(hours=1)
    task = client.create_task(
        parent=queue.name,
        task=tasks_v2.Task(
            name=f"{queue.name}/tasks/ae1", app_engine_http_request=request, schedule_time=later
        ),
    )
    assert task.app_engine_http_request.body == b""  # the BASIC view omits App Engine bodies
    full = client.get_task(request={"name": task.name, "response_view": tasks_v2.Task.View.FULL})
    assert full.app_engine_http_request.body == b"payload"

    client.run_task(name=task.name)
    arrival = target.wait_for(1)[0]
    assert (arrival.method, arrival.path, arrival.body) == ("POST", "/_ah/relay?x=1", b"payload")
    headers = arrival.headers
    assert headers["x-appengine-queuename"] == "appengine"
    assert headers["x-appengine-taskname"] == "ae1"
    assert headers["x-appengine-taskretrycount"] == "0"
    assert headers["x-appengine-taskexecutioncount"] == "0"
    assert float(headers["x-appengine-tasketa"]) == pytest.approx(later.timestamp(), abs=1e-6)
    assert headers["x-custom"] == "kept"
    assert headers["content-type"] == "application/octet-stream"
    assert "AppEngine-Google" in headers["user-agent"]
    assert not any(name.startswith("x-cloudtasks-") for name in headers)


# -- lifecycle -------------------------------------------------------------------------------


def test_stop_with_a_slow_dispatch_in_flight(make_target: Callable[..., Target]) -> None:
    release = threading.Event()
    target = make_target(lambda _arrival: 200 if release.wait(30) else 500)
    before = set(threading.enumerate())
    emulator = CloudTasksEmulator()
    client = connect(emulator.start())
    queue = make_queue(client, "stop")
    client.create_task(parent=queue.name, task=http_task(target.url))
    target.wait_for(1)
    client.transport.close()
    try:
        started = time.monotonic()
        emulator.stop()
        assert time.monotonic() - started < 2.0
        # Every emulator thread has ended although the target still holds the request.
        assert not [t.name for t in threading.enumerate() if t.name.startswith("tasks-emulator")]
        assert not release.is_set()
        emulator.stop()  # idempotent
    finally:
        release.set()

    def new_threads() -> list[str]:
        return sorted(t.name for t in set(threading.enumerate()) - before if t.is_alive())

    wait_until(lambda: not new_threads(), timeout=5, interval=0.02, what="threads to end")
    with pytest.raises(RuntimeError):
        emulator.start()  # one start per emulator


def test_runs_as_its_own_process_and_stops_on_sigterm(tmp_path: Path) -> None:
    shared = Path(tasks_emulator_package.__file__).resolve().parents[3]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(shared), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "pubsub_toolkit_local.tasks_emulator", "--port", "0"]
    with (tmp_path / "stderr.log").open("wb") as stderr:
        process = subprocess.Popen(
            [*command, "--oidc-port", "0"],
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=env,
            start_new_session=True,  # its own process group, as the local stack runs it
        )
    try:
        assert process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            assert selector.select(timeout=30), "no readiness line within 30 s"
        ready = json.loads(process.stdout.readline())
        assert ready["ready"] == "cloud-tasks-emulator"

        client = connect(ready["address"])
        queue = make_queue(client, "process")
        assert client.get_queue(name=queue.name).state == tasks_v2.Queue.State.RUNNING
        client.transport.close()
        with urllib.request.urlopen(ready["oidc_jwks_url"], timeout=5) as response:
            assert json.load(response)["keys"][0]["alg"] == "RS256"

        os.killpg(process.pid, signal.SIGTERM)
        assert process.wait(timeout=10) == 0
        assert "SIGTERM received" in (tmp_path / "stderr.log").read_text()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
