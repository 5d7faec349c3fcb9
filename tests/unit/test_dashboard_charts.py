"""The last hour's series and their SVG charts without servers: per-minute buckets from the
flusher, lateness quantiles from bucket counts, backlog samples, and the markup's hooks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.observability import LATENESS, DecisionLog, Metrics
from pubsub_toolkit.stats import CounterFlusher
from pubsub_toolkit.stores.stats.memory import MemoryStatsStore
from pubsub_toolkit_cli.dashboard.charts import render_charts
from pubsub_toolkit_cli.dashboard.history import BacklogHistory, History, window
from pubsub_toolkit_cli.group_status import GroupStatus

START = datetime(2030, 1, 1, 12, 0, 30, tzinfo=UTC)


class Svg(HTMLParser):
    """Every element with a data-minute, by its chart (the enclosing svg's id)."""

    def __init__(self) -> None:
        super().__init__()
        self.chart = ""
        self.marks: dict[str, list[dict[str, str | None]]] = {}
        self.charts: dict[str, dict[str, str | None]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "svg":
            self.chart = str(found["id"])
            self.charts[self.chart] = found
        elif "data-minute" in found:
            self.marks.setdefault(self.chart, []).append(found)


def values(svg: Svg, chart: str) -> dict[str, str | None]:
    return {str(m["data-minute"]): m["data-value"] for m in svg.marks.get(chart, [])}


def test_the_flusher_fills_minute_buckets_and_lateness_quantiles_come_back() -> None:
    clock, metrics, store = ManualClock(START), Metrics(), MemoryStatsStore()
    flusher = CounterFlusher(metrics, store, interval=3600, clock=clock)
    log = DecisionLog("c", metrics)
    metrics.increment("deliveries", 5)
    log.decision("dead_lettered", "x", dedup_key=None, reason="invalid_delay_seconds")
    for value in (0.02, 0.03, 0.04, 4.0):  # p50 in the 0.05 bucket, p99 in the 5 s one
        metrics.observe(LATENESS, value)
    written = flusher.flush()
    assert written["deliveries"] == 5 and written["dead_lettered.invalid_delay_seconds"] == 1
    clock.advance(timedelta(minutes=1))
    metrics.increment("deliveries", 2)
    metrics.increment("duplicate")
    assert flusher.flush() == {"deliveries": 2, "duplicate": 1}  # histograms did not grow
    assert store.totals() == {
        "deliveries": 7,
        "duplicate": 1,
        "dead_lettered": 1,
        "dead_lettered.invalid_delay_seconds": 1,
    }  # no histogram buckets in the totals: they are per minute only

    now = clock.now()
    history = History.build(now, store.minutes(now - timedelta(minutes=59), now))
    assert len(history.minutes) == 60 and history.minutes[-1] == datetime(
        2030, 1, 1, 12, 1, tzinfo=UTC
    )
    assert history.deliveries[-2:] == (5, 2)
    assert history.duplicates[-2:] == (0, 1)
    assert history.dead_letters[-2:] == (1, 0)
    assert history.lateness_p50[-2:] == (0.05, None)
    assert history.lateness_p99[-2:] == (5.0, None)
    assert history.releases[-2:] == (4, 0)
    assert sum(history.deliveries) == 7


def test_memory_minutes_expire_and_the_window_drops_old_ones() -> None:
    store = MemoryStatsStore()
    store.add({"deliveries": 1}, minute=START)
    store.add({"deliveries": 1}, minute=START + timedelta(hours=2))  # the first one is pruned
    everything = store.minutes(START - timedelta(hours=1), START + timedelta(hours=3))
    assert list(everything) == [datetime(2030, 1, 1, 14, 0, tzinfo=UTC)]
    assert window(START + timedelta(hours=2))[0] == datetime(2030, 1, 1, 13, 1, tzinfo=UTC)


def test_backlog_keeps_the_last_sample_per_minute_and_charts_the_busiest() -> None:
    backlog = BacklogHistory()
    now = START

    def rows(**parked: int) -> list[GroupStatus]:
        return [GroupStatus(g, None, 0, n, None, None, ()) for g, n in parked.items()]

    backlog.record(now, rows(a=1, b=9))
    backlog.record(now, rows(a=3, b=9, c=1))  # the same minute: the last sample wins
    now += timedelta(minutes=1)
    backlog.record(now, rows(b=4))  # a and c no longer listed: their work is done
    history = History.build(now, {}, backlog.samples, busiest=2)
    assert [g for g, _ in history.backlog] == ["b", "a"]  # by most parked, then by name
    series = dict(history.backlog)
    assert series["b"][-3:] == (None, 9, 4)
    assert series["a"][-3:] == (None, 3, 0)
    now += timedelta(hours=2)  # nothing parked within the window any more: forgotten
    backlog.record(now, [])
    assert backlog.samples == {}


def test_charts_carry_each_minute_and_keep_the_page_free_of_styles_and_scripts() -> None:
    now = datetime(2030, 1, 1, 12, 59, tzinfo=UTC)
    minutes = window(now)
    buckets = {
        minutes[-1]: {"deliveries": 7, "duplicate": 2, "delay_lateness_seconds.bucket.6": 3},
        minutes[-3]: {"deliveries": 4, "dead_lettered": 1, "delay_lateness_seconds.bucket.12": 1},
    }
    backlog = {"<g&>": {minutes[-1]: 5}}
    html = render_charts(History.build(now, buckets, backlog))
    svg = Svg()
    svg.feed(html)
    assert svg.charts["chart-deliveries"]["data-total"] == "11"
    assert svg.charts["chart-deliveries"]["data-max"] == "7"
    assert values(svg, "chart-deliveries")["12:59"] == "7"
    assert values(svg, "chart-deliveries")["12:57"] == "4"
    assert len(values(svg, "chart-deliveries")) == 60
    assert values(svg, "chart-duplicates")["12:59"] == "2"
    assert values(svg, "chart-dead-letters")["12:57"] == "1"
    # Lateness points exist only where something was released: p50 and p99 of two minutes.
    lateness = [(m["data-minute"], m["data-value"]) for m in svg.marks["chart-lateness"]]
    assert sorted(lateness) == [
        ("12:57", "inf"),
        ("12:57", "inf"),
        ("12:59", "1.0"),
        ("12:59", "1.0"),
    ]
    assert values(svg, "chart-backlog") == {"12:59": "5"}
    assert "&lt;g&amp;&gt;" in html and "<g&>" not in html
    assert "style=" not in html and "<script" not in html
    assert render_charts(History()) == ""
