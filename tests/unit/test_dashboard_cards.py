"""The status page's cards without the emulators: each part read on its own under a deadline
(a failing or hanging backend costs only its cards), the next command for a stuck group (parsed
by the real CLI), relative times, the lateness figures, and the Cloud Monitoring reader's
bounded requests against a local HTTP server."""

from __future__ import annotations

import re
import shlex
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import requests
from werkzeug.serving import make_server

from pubsub_toolkit.observability import BUCKETS, LATENESS
from pubsub_toolkit.stores.stats.base import BUCKET_MARK, minute_of
from pubsub_toolkit_cli.cli import build_parser
from pubsub_toolkit_cli.cli.operations import cmd_fifo_replay, cmd_fifo_skip
from pubsub_toolkit_cli.dashboard.app import create_app
from pubsub_toolkit_cli.dashboard.cards import CardReader, Part
from pubsub_toolkit_cli.dashboard.history import History
from pubsub_toolkit_cli.dashboard.monitoring import (
    CloudMonitoring,
    ConsumerHealth,
    NoMonitoring,
    NotAvailable,
)
from pubsub_toolkit_cli.dashboard.render import render_page
from pubsub_toolkit_cli.dashboard.snapshot import (
    DeadLetterCounts,
    DedupRate,
    ScheduledCount,
    StatusSnapshot,
    StoreHealth,
    gather,
)
from pubsub_toolkit_cli.group_status import GroupStatus, next_command
from pubsub_toolkit_local.processes import free_port

NOW = datetime(2030, 1, 1, 12, 0, 5, 123456, tzinfo=UTC)


class Source:
    """A StatusSource whose store refuses and whose Pub/Sub read hangs until released."""

    consumer = "c"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.dead_letter_reads = 0

    def _store_down(self) -> Any:
        raise ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    def fifo_groups(self, now: datetime) -> list[GroupStatus]:
        return self._store_down()  # type: ignore[no-any-return]

    def dead_letters(self, now: datetime) -> DeadLetterCounts:
        self.dead_letter_reads += 1
        self.release.wait(60)
        return DeadLetterCounts("dl", True)

    def scheduled(self, now: datetime) -> ScheduledCount:
        return ScheduledCount("projects/p/locations/l/queues/q", 100, at_least=True)

    def dedup(self) -> DedupRate:
        return self._store_down()  # type: ignore[no-any-return]

    def history(self, now: datetime) -> History:
        return self._store_down()  # type: ignore[no-any-return]

    def store(self, now: datetime) -> StoreHealth:
        return self._store_down()  # type: ignore[no-any-return]

    def backlogs(self, now: datetime) -> tuple[Part, ...]:
        metrics = NoMonitoring()
        return (Part("Cloud Monitoring", lambda: metrics.backlog("final", "final-sub", now)),)

    def consumers(self, now: datetime) -> ConsumerHealth:
        return ConsumerHealth(timedelta(minutes=15), now - timedelta(seconds=42), 200, 3, 0.02, 0.7)

    def backend(self, part: str) -> str:
        return {"dead_letters": "Pub/Sub", "scheduled": "Cloud Tasks"}.get(part, "store")


def test_a_failing_or_hanging_backend_costs_only_its_cards() -> None:
    source, reader = Source(), CardReader(timeout=0.3)
    try:
        snapshot = gather(source, now=NOW, reader=reader)
        problems = dict(snapshot.problems)
        for part in ("groups", "dedup", "history", "store"):
            assert problems[part] == (
                "store unreachable: ConnectionError: Error 111 connecting to 127.0.0.1:6379. "
                "Connection refused."
            ), part
        assert problems["dead_letters"] == "Pub/Sub unreachable: no answer within 0.3 s"
        assert problems["backlog0"] == "not available on the emulator (no Cloud Monitoring)"
        assert "scheduled" not in problems and "consumers" not in problems
        page = render_page(snapshot)
        assert "id='backlog-unavailable'>not available on the emulator" in page
        assert "id='store-unavailable'>store unreachable: ConnectionError" in page
        assert "id='fifo-unavailable'>store unreachable" in page
        assert "id='dead-letters-unavailable'>Pub/Sub unreachable" in page
        assert "id='scheduled-count'>≥ 100<" in page
        assert "id='consumers-error-rate'>1.5%<" in page and "42 s ago" in page
        assert "id='handler-p50'>20 ms<" in page and "id='handler-p99'>700 ms<" in page

        # The hanging read is not started again while it hangs: its card says so.
        again = gather(source, now=NOW, reader=reader)
        assert dict(again.problems)["dead_letters"].startswith(
            "Pub/Sub unreachable: the previous read has not answered after"
        )
        assert source.dead_letter_reads == 1

        # The app answers every route with the store down (no page-wide 500).
        client = create_app(lambda: gather(source, now=NOW, reader=reader)).test_client()
        assert client.get("/").status_code == 200
        assert client.get("/panel").status_code == 200
        doc = client.get("/status.json").get_json()
        assert doc["problems"]["store"].startswith("store unreachable: ")
        assert doc["scheduled"] == {
            "queue": "projects/p/locations/l/queues/q",
            "waiting": 100,
            "at_least": True,
        }
    finally:
        source.release.set()


def test_the_next_command_is_one_the_cli_takes() -> None:
    blocked = GroupStatus("orders eu", 9, 4, 1, None, 5, ())
    waiting = GroupStatus("g-1", 4, 1, 2, 30.0, None, ())
    idle = GroupStatus("g-2", 4, 4, 0, None, None, ())
    assert next_command(idle, "c") is None
    replay = next_command(blocked, "worker 1")
    skip = next_command(waiting, "worker 1")
    assert replay == "pubsub-toolkit fifo replay --consumer-id 'worker 1' 'orders eu'"
    assert skip == "pubsub-toolkit fifo skip --consumer-id 'worker 1' g-1 2"
    args = build_parser().parse_args(shlex.split(replay)[1:])
    assert (args.func, args.group, args.consumer_id) == (cmd_fifo_replay, "orders eu", "worker 1")
    args = build_parser().parse_args(shlex.split(skip)[1:])
    assert (args.func, args.group, args.seq, args.consumer_id) == (
        cmd_fifo_skip,
        "g-1",
        2,
        "worker 1",
    )


def lateness_minute(*values: float) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        index = next((i for i, bound in enumerate(BUCKETS) if value <= bound), len(BUCKETS))
        key = f"{LATENESS}{BUCKET_MARK}{index}"
        counts[key] = counts.get(key, 0) + 1
    return counts


def test_lateness_figures_and_times_without_microseconds() -> None:
    minute = minute_of(NOW)
    relay = {
        minute - timedelta(minutes=3): lateness_minute(*[0.02] * 9, 4.0),
        minute: lateness_minute(0.3, 0.4),
    }
    history = History.build(NOW, {}, relay=relay)
    assert (history.hour_lateness_p50, history.hour_lateness_p99) == (0.05, 5.0)
    snapshot = StatusSnapshot(
        NOW,
        "c",
        (GroupStatus("g", 4, 1, 2, 185.0, None, ()),),
        DeadLetterCounts("dl", True),
        ScheduledCount(None),
        DedupRate(0, 0),
        history=history,
        store=StoreHealth("redis"),
    )
    page = render_page(snapshot)
    assert "id='lateness-p50'>≤ 50 ms<" in page and "id='lateness-p99'>≤ 5 s<" in page
    assert "id='lateness-releases'>12<" in page
    assert "title='2030-01-01 11:57:00 UTC'>3 min ago</time>" in page
    assert "title='2030-01-01 12:00:05 UTC'>12:00:05 UTC<" in page
    text = re.sub(r"<[^>]*>", " ", page)  # what the page shows, without the markup
    assert not re.search(r"\d\d:\d\d:\d\d\.\d", text), "a time with fractions of a second"


@pytest.fixture
def monitoring_api() -> Iterator[tuple[str, list[dict[str, str]]]]:
    """A local HTTP server answering ``timeSeries.list`` with documented response bodies."""
    from flask import Flask, jsonify, request

    seen: list[dict[str, str]] = []
    app = Flask("monitoring")

    def point(end: str, value: dict[str, Any]) -> dict[str, Any]:
        return {"interval": {"endTime": end}, "value": value}

    @app.get("/v3/projects/<project>/timeSeries")
    def series(project: str) -> Any:
        args = dict(request.args)
        seen.append(args)
        metric = args["filter"].split('"')[1]
        newest, older = "2030-01-01T12:00:00Z", "2030-01-01T11:59:00Z"
        if metric.endswith("num_undelivered_messages"):
            found = [{"points": [point(newest, {"int64Value": "42"}), point(older, {})]}]
        elif metric.endswith("oldest_unacked_message_age"):
            found = [{"points": [point(newest, {"int64Value": "95"})]}]
        elif metric.endswith("decisions"):
            found = [
                {
                    "metric": {"labels": {"outcome": "processed"}},
                    "points": [point(newest, {"int64Value": "97"})],
                },
                {
                    "metric": {"labels": {"outcome": "handler_failed"}},
                    "points": [point(older, {"int64Value": "3"})],
                },
            ]
        elif metric.endswith("handler.duration"):
            p99 = args["aggregation.crossSeriesReducer"].endswith("99")
            found = [{"points": [point(newest, {"doubleValue": 0.8 if p99 else 0.012})]}]
        else:
            return jsonify({"error": {"message": "no such metric"}}), 404
        return jsonify({"timeSeries": found})

    port = free_port()
    server = make_server("127.0.0.1", port, app)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}/v3", seen
    server.shutdown()
    thread.join(10)


def test_cloud_monitoring_reads_are_bounded_and_parsed(
    monitoring_api: tuple[str, list[dict[str, str]]],
) -> None:
    api, seen = monitoring_api
    with requests.Session() as session:
        metrics = CloudMonitoring("p", session, api=api)
        backlog = metrics.backlog("final", "final-sub", NOW)
        assert (backlog.undelivered, backlog.oldest_unacked_s) == (42, 95)
        assert metrics.undelivered("dead-letter-sub", NOW) == 42
        health = metrics.consumer(NOW)
        assert (health.decisions, health.errors, health.error_rate) == (100, 3, 0.03)
        assert health.last_decision_at == datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
        assert (health.handler_p50_s, health.handler_p99_s) == (0.012, 0.8)
        with pytest.raises(NotAvailable, match="Cloud Monitoring answered 404"):
            metrics.queue_depth("q", NOW)
    assert all(int(args["pageSize"]) <= 20 for args in seen)
    assert 'resource.label.subscription_id="final-sub"' in seen[0]["filter"]
    assert seen[0]["aggregation.perSeriesAligner"] == "ALIGN_MAX"
