"""The status page's charts of the last hour in a real headless Chromium, for a known workload.

Five synthetic minutes on a manual clock. Each minute a real :class:`Ingress` (Redis dedup
store) handles a known number of deliveries - new messages, duplicates of earlier ones and
contract violations (dead letters) - the relay's metrics observe known lateness, and both
:class:`CounterFlusher` s write to real Redis stats stores (ingress and relay scopes); the FIFO
groups' parked counts are set in a real Redis FIFO store and sampled by the page's source once
a minute, as an open page would. The page (the dashboard app on loopback, in a thread of this
process) must chart exactly those numbers per minute, follow a sixth minute without reloading,
and keep its Content-Security-Policy free of violations.

``UPDATE_DOCS_SCREENSHOTS=1`` also writes the screenshot to docs/status-page-charts.png.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from google.cloud import pubsub_v1
from werkzeug.serving import make_server

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.ingress.pipeline import Ingress
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import LATENESS, Metrics
from pubsub_toolkit.stats import CounterFlusher
from pubsub_toolkit.stores.counters.redis import RedisSequenceCounter
from pubsub_toolkit.stores.dedup.redis import RedisDedupStore
from pubsub_toolkit.stores.fifo_state.redis import RedisFifoStore
from pubsub_toolkit.stores.stats.base import RELAY_SCOPE
from pubsub_toolkit.stores.stats.redis import RedisStatsStore
from pubsub_toolkit_cli.dashboard.app import create_app
from pubsub_toolkit_cli.dashboard.snapshot import StatusSnapshot, gather
from pubsub_toolkit_cli.dashboard.sources import LiveStatusSource
from pubsub_toolkit_local.processes import free_port
from tests.conftest import repo_root
from tests.ops.test_dashboard import CHROMIUM, CHROMIUM_ARGS, png_size
from tests.support.sinks import RecordingSink
from tests.support.waiting import wait_until

CONSUMER = "charts-consumer"
START = datetime(2030, 1, 1, 12, 0, 5, tzinfo=UTC)
MINUTES = ("12:00", "12:01", "12:02", "12:03", "12:04")
# Per minute: new messages, duplicates of earlier ones, contract violations (dead letters).
NEW = (3, 5, 0, 8, 2)
DUPLICATES = (1, 0, 0, 2, 1)
DEAD = (0, 1, 0, 0, 2)
# Lateness observed by the relay per minute; the chart shows the bucket bounds of p50 and p99.
LATENESS_SEEN: tuple[tuple[float, ...], ...] = ((), (0.02,) * 9 + (4.0,), (), (0.3, 0.4), ())
P50 = {"12:01": "0.05", "12:03": "0.5"}
P99 = {"12:01": "5.0", "12:03": "0.5"}
# Parked messages per group per minute (the FIFO store as the consumer's gate left it).
PARKED = {
    "g-busy": (0, 4, 9, 6, 2),
    "g-some": (1, 1, 3, 0, 0),
    "g-calm": (0, 0, 0, 1, 1),
}
VIEWPORT = {"width": 1280, "height": 1100}


class Workload:
    """The known workload's parts, on real Redis."""

    def __init__(self, url: str, unique: str) -> None:
        self.client = redis.Redis.from_url(url)
        self.clock = ManualClock(START)
        self.ingress = Ingress(
            store=RedisDedupStore(self.client, prefix=f"charts:{unique}:dedup:"),
            sink=RecordingSink(),
            final_topic="projects/p/topics/final",
            dead_letter_topic="projects/p/topics/dead-letter",
            lease=timedelta(seconds=60),
            ttl=timedelta(hours=2),
            clock=self.clock,
        )
        prefix = f"charts:{unique}:stats:"
        self.stats = RedisStatsStore(self.client, prefix=prefix)
        self.relay_stats = RedisStatsStore(self.client, prefix=prefix, scope=RELAY_SCOPE)
        self.relay_metrics = Metrics()
        self.flushers = (
            CounterFlusher(self.ingress.metrics, self.stats, interval=3600, clock=self.clock),
            CounterFlusher(self.relay_metrics, self.relay_stats, interval=3600, clock=self.clock),
        )
        self.fifo = RedisFifoStore(self.client, prefix=f"charts:{unique}:fifo:")
        self.sent = 0

    def minute(self, new: int, duplicates: int, dead: int, lateness: tuple[float, ...]) -> None:
        keys = [f"m-{self.sent + i}" for i in range(new)]
        for key in keys:
            self.handle(Message(b"order", {"dedup_key": key}))
        for _ in range(duplicates):  # a copy of the first message ever sent: a duplicate
            self.handle(Message(b"order", {"dedup_key": "m-0"}))
        for _ in range(dead):
            self.handle(Message(b"bad", {"delay_seconds": "soon"}))
        self.sent += new
        for value in lateness:
            self.relay_metrics.observe(LATENESS, value)
        for flusher in self.flushers:
            flusher.flush()

    def handle(self, message: Message) -> None:
        self.ingress.handle(replace(message, message_id=f"id-{self.client.incr('charts-ids')}"))

    def park(self, group: str, parked: int) -> None:
        state = self.fifo.load(CONSUMER, group)
        wanted = replace(state, parked=tuple(range(2, 2 + parked)), gap_since=self.clock.now())
        assert self.fifo.save(CONSUMER, group, wanted, state) is not None


@pytest.fixture
def workload(redis_url: str, unique: str) -> Iterator[Workload]:
    w = Workload(redis_url, unique)
    yield w
    w.client.close()


def serve(take: Any) -> tuple[Any, threading.Thread, int]:
    port = free_port()
    server = make_server("127.0.0.1", port, create_app(take, refresh_seconds=1, min_interval=0))
    thread = threading.Thread(target=server.serve_forever, name="dashboard", daemon=True)
    thread.start()
    return server, thread, port


def test_charts_show_the_known_workload_per_minute_and_follow_the_next(
    workload: Workload, pubsub_emulator: str, tmp_path: Path
) -> None:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: `make system-deps` installs Debian's chromium")
    from playwright.sync_api import sync_playwright

    subscriber = pubsub_v1.SubscriberClient()
    source = LiveStatusSource(
        consumer=CONSUMER,
        fifo_store=workload.fifo,
        counter=RedisSequenceCounter(workload.client, prefix="charts-counters:"),
        subscriber=subscriber,
        dead_letter_subscription="projects/charts/subscriptions/none",
        stats=workload.stats,
        relay_stats=workload.relay_stats,
        tasks_client=None,
        queue=None,
    )

    def take() -> StatusSnapshot:
        return gather(source, now=workload.clock.now())

    for i in range(len(MINUTES)):
        if i:
            workload.clock.advance(timedelta(minutes=1))
        workload.minute(NEW[i], DUPLICATES[i], DEAD[i], LATENESS_SEEN[i])
        for group, parked in PARKED.items():
            workload.park(group, parked[i])
        take()  # the page's source samples the groups once a minute, as an open page would
    deliveries = [n + d + k for n, d, k in zip(NEW, DUPLICATES, DEAD, strict=True)]
    assert workload.stats.totals()["deliveries"] == sum(deliveries)  # the ingress saw it all

    server, thread, port = serve(take)
    violations: list[str] = []
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport=VIEWPORT)
                page.on(
                    "console",
                    lambda m: violations.append(m.text) if "Content Security" in m.text else None,
                )
                response = page.goto(f"http://127.0.0.1:{port}/", wait_until="load")
                assert response is not None
                assert response.headers["content-security-policy"].startswith("default-src 'none'")
                check_charts(page, deliveries)
                shot = tmp_path / "status-page-charts.png"
                page.screenshot(path=str(shot), full_page=True)
                assert png_size(shot)[0] == VIEWPORT["width"]
                assert shot.stat().st_size > 30_000, "a near-empty screenshot"
                if os.environ.get("UPDATE_DOCS_SCREENSHOTS") == "1":
                    shutil.copyfile(shot, repo_root() / "docs" / "status-page-charts.png")

                # A sixth minute: the panel refreshes in place (no reload) with it.
                page.evaluate("window.__sameDocument = true")
                workload.clock.advance(timedelta(minutes=1))
                workload.minute(6, 0, 0, ())
                wait_until(
                    lambda: (
                        page.get_attribute("#chart-deliveries", "data-total")
                        == str(sum(deliveries) + 6)
                    ),
                    timeout=30,
                    what="the sixth minute on the page",
                )
                assert bar(page, "deliveries", "12:05") == "6"
                assert bar(page, "deliveries", "12:00") == str(deliveries[0])  # still in the hour
                assert page.evaluate("window.__sameDocument === true"), "the page was reloaded"
            finally:
                browser.close()
    finally:
        server.shutdown()
        thread.join(10)
        subscriber.close()
    assert not thread.is_alive()
    assert violations == []


def bar(page: Any, chart: str, minute: str) -> str:
    return str(page.get_attribute(f"#chart-{chart} rect[data-minute='{minute}']", "data-value"))


def points(page: Any, chart: str, series: str) -> dict[str, str]:
    found = page.eval_on_selector_all(
        f"#chart-{chart} g[data-series='{series}'] circle",
        "els => els.map(e => [e.dataset.minute, e.dataset.value])",
    )
    return {str(m): str(v) for m, v in found}


def check_charts(page: Any, deliveries: list[int]) -> None:
    assert page.get_attribute("#chart-deliveries", "data-total") == str(sum(deliveries))
    assert page.inner_text("#chart-deliveries-total") == str(sum(deliveries))
    assert page.get_attribute("#chart-duplicates", "data-total") == str(sum(DUPLICATES))
    assert page.get_attribute("#chart-dead-letters", "data-total") == str(sum(DEAD))
    for i, minute in enumerate(MINUTES):
        assert bar(page, "deliveries", minute) == str(deliveries[i]), minute
        assert bar(page, "duplicates", minute) == str(DUPLICATES[i]), minute
        assert bar(page, "dead-letters", minute) == str(DEAD[i]), minute
    assert page.locator("#chart-deliveries rect").count() == 60  # the whole hour, per minute
    title = page.text_content("#chart-deliveries rect[data-minute='12:03'] title")
    assert title == f"12:03: {deliveries[3]}"  # what a pointer over the bar shows
    assert points(page, "lateness", "p50") == P50
    assert points(page, "lateness", "p99") == P99
    # The hour's figures beside the chart: 9 at <= 50 ms, 2 at <= 0.5 s, 1 at <= 5 s.
    assert page.inner_text("#lateness-p50") == "≤ 50 ms"
    assert page.inner_text("#lateness-p99") == "≤ 5 s"
    assert page.inner_text("#lateness-releases") == "12"
    charted = page.eval_on_selector_all(
        "#chart-backlog g[data-series]", "els => els.map(e => e.dataset.series)"
    )
    assert charted == ["g-busy", "g-some", "g-calm"]  # the busiest first
    for group, parked in PARKED.items():
        first = next(i for i, n in enumerate(parked) if n)  # followed from its first backlog on
        assert points(page, "backlog", group) == {
            m: str(n) for m, n in list(zip(MINUTES, parked, strict=True))[first:]
        }, group
    for selector in ("#chart-deliveries", "#chart-lateness", "#chart-backlog"):
        box = page.locator(selector).bounding_box()
        assert box is not None and box["width"] > 200 and box["height"] > 50, selector
