"""The status page in headless Chromium when the store is stopped, and its reads bounded.

The store is a real redis-server this test starts (and stops, by its process group); dead
letters wait on a real Pub/Sub emulator subscription (120, more than the page samples) and
delayed tasks in the toolkit's Cloud Tasks emulator (105, more than one page). The page's
source gets the real clients behind a pass-through recorder that notes what each request asked
for and got. With the store up every card draws; with it stopped, the store's cards say
"store unreachable" and the others still draw, the page and ``/status.json`` still answer 200,
and no request ever asked for or returned more than the bound.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from google.cloud import pubsub_v1, tasks_v2
from google.cloud.tasks_v2.services.cloud_tasks.transports import CloudTasksGrpcTransport
from werkzeug.serving import make_server

from pubsub_toolkit.stores.counters.redis import RedisSequenceCounter
from pubsub_toolkit.stores.fifo_state.redis import RedisFifoStore
from pubsub_toolkit.stores.stats.redis import RedisStatsStore
from pubsub_toolkit_cli.dashboard.app import create_app
from pubsub_toolkit_cli.dashboard.snapshot import StatusSnapshot, gather
from pubsub_toolkit_cli.dashboard.sources import LiveStatusSource
from pubsub_toolkit_cli.emulator import emulator_channel
from pubsub_toolkit_local import emulators
from pubsub_toolkit_local.processes import RunningService, free_port, start_service
from pubsub_toolkit_local.tasks_emulator import CloudTasksEmulator
from tests.ops.test_dashboard import CHROMIUM, CHROMIUM_ARGS
from tests.support.waiting import wait_until

CONSUMER = "down-consumer"
GROUP = "g-gap"
DEAD_LETTERS = 120  # more than the page's sample
TASKS = 105  # more than one page
BOUND = 100  # no request asks for or returns more items than this
VIEWPORT = {"width": 1280, "height": 1000}
ABSOLUTE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$")


class Recorder:
    """Passes every call to the real client and notes what each listing asked for and got."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.asked: list[tuple[str, int]] = []  # (method, items asked for)
        self.got: list[tuple[str, int]] = []  # (method, items returned)
        self.lock = threading.Lock()

    def pull(self, **request: Any) -> Any:
        response = self._client.pull(**request)
        with self.lock:
            self.asked.append(("pull", int(request["max_messages"])))
            self.got.append(("pull", len(response.received_messages)))
        return response

    def list_tasks(self, request: dict[str, Any], **options: Any) -> Any:
        with self.lock:
            self.asked.append(("list_tasks", int(request.get("page_size", 0)) or 1000))
        pager = self._client.list_tasks(request=request, **options)
        recorder = self

        class Pages:
            @property
            def pages(self) -> Iterator[Any]:
                for page in pager.pages:
                    with recorder.lock:
                        recorder.got.append(("list_tasks", len(page.tasks)))
                    yield page

        return Pages()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[tuple[RunningService, str]]:
    """A redis-server only this test uses: stopping it stops nobody else's store."""
    port = free_port()
    service = start_service(emulators.redis_server(port), tmp_path / "redis")
    yield service, f"redis://127.0.0.1:{port}/0"
    service.stop()


@pytest.fixture
def tasks_queue() -> Iterator[tuple[tasks_v2.CloudTasksClient, str]]:
    emulator = CloudTasksEmulator()
    address = emulator.start()
    client = tasks_v2.CloudTasksClient(
        transport=CloudTasksGrpcTransport(channel=emulator_channel(address))
    )
    parent = "projects/down/locations/here"
    queue = client.create_queue(parent=parent, queue=tasks_v2.Queue(name=f"{parent}/queues/q"))
    later = datetime.now(UTC) + timedelta(hours=1)
    for i in range(TASKS):
        client.create_task(
            parent=queue.name,
            task=tasks_v2.Task(
                http_request=tasks_v2.HttpRequest(url=f"http://127.0.0.1:9/never/{i}"),
                schedule_time=later,
            ),
        )
    yield client, queue.name
    client.transport.close()
    emulator.stop()


def dead_letter_subscription(project: str, unique: str) -> str:
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    topic = publisher.create_topic(name=f"projects/{project}/topics/dl-{unique}").name
    name = f"projects/{project}/subscriptions/dl-sub-{unique}"
    subscriber.create_subscription(name=name, topic=topic)
    futures = [
        publisher.publish(topic, b"bad", error_reason="fifo_poison" if i % 3 else "too_late")
        for i in range(DEAD_LETTERS)
    ]
    for future in futures:
        future.result(timeout=30)
    subscriber.close()
    return name


def test_with_the_store_stopped_the_other_cards_draw_and_reads_stay_bounded(
    pubsub_emulator: str,
    own_redis: tuple[RunningService, str],
    tasks_queue: tuple[tasks_v2.CloudTasksClient, str],
    project_id: str,
    unique: str,
    tmp_path: Path,
) -> None:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: `make system-deps` installs Debian's chromium")
    from playwright.sync_api import sync_playwright

    redis_service, url = own_redis
    client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    fifo, counter = RedisFifoStore(client), RedisSequenceCounter(client)
    for _ in range(4):
        counter.reserve(GROUP)
    state = fifo.load(CONSUMER, GROUP)
    gap = replace(
        state, last_processed=1, parked=(3, 4), gap_since=datetime.now(UTC) - timedelta(minutes=3)
    )
    assert fifo.save(CONSUMER, GROUP, gap, state) is not None
    stats = RedisStatsStore(client)
    stats.add({"deliveries": 10, "duplicate": 2}, minute=datetime.now(UTC))

    subscriber = Recorder(pubsub_v1.SubscriberClient())
    tasks = Recorder(tasks_queue[0])
    source = LiveStatusSource(
        consumer=CONSUMER,
        fifo_store=fifo,
        counter=counter,
        subscriber=subscriber,
        dead_letter_subscription=dead_letter_subscription(project_id, unique),
        stats=stats,
        tasks_client=tasks,
        queue=tasks_queue[1],
        store_backend="redis",
        subscriptions=(("origin", "origin-to-ingress"), ("final", "final-sub")),
    )

    def take() -> StatusSnapshot:
        return gather(source, now=datetime.now(UTC))

    port = free_port()
    server = make_server("127.0.0.1", port, create_app(take, refresh_seconds=1, min_interval=0))
    thread = threading.Thread(target=server.serve_forever, name="dashboard", daemon=True)
    thread.start()
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport=VIEWPORT)
                page.goto(f"http://127.0.0.1:{port}/", wait_until="load")
                check_store_up(page)
                redis_service.stop()  # the store is gone; the open page keeps refreshing
                wait_until(
                    lambda: page.locator("#store-unavailable").count() == 1,
                    timeout=60,
                    what="the store card to say it is unreachable",
                )
                check_store_down(page)
                # A fresh load with the store stopped: the page, not a bare 500.
                response = page.goto(f"http://127.0.0.1:{port}/", wait_until="load")
                assert response is not None and response.status == 200
                check_store_down(page)
                page.screenshot(path=str(tmp_path / "store-down.png"), full_page=True)
                doc = page.request.get(f"http://127.0.0.1:{port}/status.json")
                assert doc.status == 200
                problems = doc.json()["problems"]
                assert problems["store"].startswith("store unreachable: ")
                assert "dead_letters" not in problems and "scheduled" not in problems
            finally:
                browser.close()
    finally:
        server.shutdown()
        thread.join(10)
        subscriber.close()
    for recorder in (subscriber, tasks):
        assert recorder.asked and recorder.got
        assert all(n <= BOUND for _, n in recorder.asked), recorder.asked
        assert all(n <= BOUND for _, n in recorder.got), recorder.got


def check_store_up(page: Any) -> None:
    assert page.inner_text("#store-state") == "reachable"
    row = page.locator(f"#fifo-groups tr[data-group='{GROUP}']")
    assert row.locator("td[data-field='state']").inner_text() == "waiting for 2"
    command = row.locator("td[data-field='next'] code").inner_text()
    assert command == f"pubsub-toolkit fifo skip --consumer-id {CONSUMER} {GROUP} 2"
    gap = row.locator("td[data-field='gap_age'] time")
    assert gap.inner_text() == "3 min ago"  # the gap opened 3 minutes (and a few s) ago
    assert ABSOLUTE.match(str(gap.get_attribute("title")))
    assert page.inner_text("#dedup-deliveries") == "10"
    check_other_cards(page)


def check_store_down(page: Any) -> None:
    assert page.inner_text("#store-unavailable").startswith("store unreachable: ")
    assert page.inner_text("#fifo-unavailable").startswith("store unreachable: ")
    assert page.inner_text("#dedup-unavailable").startswith("store unreachable: ")
    check_other_cards(page)


def check_other_cards(page: Any) -> None:
    """The cards that do not read the store, drawn with bounded counts."""
    assert page.inner_text("#dead-letter-total") == f"≥ {BOUND}"
    assert "reasons of a sample of" in page.inner_text("#dead-letters")
    assert page.inner_text("#scheduled-count") == f"≥ {BOUND}"
    assert page.inner_text("#backlog-unavailable").startswith("not available on the emulator")
    assert "not recorded locally" in page.inner_text("#consumers-unavailable")
    assert ABSOLUTE.match(str(page.get_attribute("#taken-at", "title")))
