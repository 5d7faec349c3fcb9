"""The status page's HTML and app without servers: escaping, stable hooks, JSON, read-only,
and the counter flusher's arithmetic."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from html.parser import HTMLParser

import pytest

from pubsub_toolkit.observability import Metrics
from pubsub_toolkit.stats import CounterFlusher
from pubsub_toolkit.stores.stats.memory import MemoryStatsStore
from pubsub_toolkit_cli.dashboard.app import create_app
from pubsub_toolkit_cli.dashboard.render import render_page
from pubsub_toolkit_cli.dashboard.snapshot import (
    DeadLetterCounts,
    DedupRate,
    ScheduledCount,
    StatusSnapshot,
)
from pubsub_toolkit_cli.group_status import GroupStatus

EVIL = "<script>alert('x')</script>\"&"


def snapshot(deliveries: int = 15) -> StatusSnapshot:
    return StatusSnapshot(
        taken_at=datetime(2030, 1, 1, tzinfo=UTC),
        consumer=EVIL,
        groups=(
            GroupStatus(EVIL, 4, 1, 2, 12.4, None, ()),
            GroupStatus("blocked", 9, 4, 1, None, 5, (2,)),
        ),
        dead_letters=DeadLetterCounts("dl", True, ((EVIL, 1), ("invalid_delay_seconds", 2))),
        scheduled=ScheduledCount("projects/p/locations/l/queues/q", 7),
        dedup=DedupRate(deliveries=deliveries, duplicates=4),
    )


class Elements(HTMLParser):
    """Collects each element's attributes and the text directly inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str | None]]] = []
        self.scripts = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, dict(attrs)))
        self.scripts += tag == "script"


def test_every_value_is_escaped_and_no_markup_is_injected() -> None:
    html = render_page(snapshot())
    assert EVIL not in html
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;&quot;&amp;" in html
    parser = Elements()
    parser.feed(html)
    assert parser.scripts == 1  # only the page's own refresh script
    groups = [a.get("data-group") for t, a in parser.found if t == "tr" and "data-group" in a]
    assert groups == [EVIL, "blocked"]  # the attribute round-trips exactly
    assert not any(a.get("src") or (t == "link") for t, a in parser.found), "no external assets"


def test_stable_hooks_carry_the_numbers() -> None:
    html = render_page(snapshot())
    for fragment in (
        "id='dedup-hit-rate' data-value='0.266667'>26.7%<",
        "id='dedup-deliveries'>15<",
        "id='dedup-duplicates'>4<",
        "id='scheduled-count'>7<",
        "id='dead-letter-total'>3<",
        "<td class='num' data-field='count'>2</td>",
        "data-field='last_issued'>4<",
        "title='2029-12-31 23:59:47 UTC'>12 s ago</time>",  # relative; absolute in the title
        "data-field='next'><code>pubsub-toolkit fifo replay --consumer-id &#x27;",
        " blocked</code>",
        "data-field='state'>BLOCKED at 5<",
        "data-field='state'>waiting for 2<",
    ):
        assert fragment in html, fragment
    empty = render_page(
        StatusSnapshot(
            datetime(2030, 1, 1, tzinfo=UTC),
            "c",
            (),
            DeadLetterCounts("dl", False),
            ScheduledCount(None),
            DedupRate(0, 0),
        )
    )
    assert "id='dedup-hit-rate' data-value=''>-<" in empty
    assert "no subscription dl" in empty and "PUBSUB_TOOLKIT_TASKS_QUEUE not set" in empty


def test_app_serves_page_panel_and_json_read_only() -> None:
    taken: list[int] = []

    def take() -> StatusSnapshot:
        taken.append(1)
        return snapshot(deliveries=15 + len(taken))

    client = create_app(take, min_interval=0).test_client()
    page = client.get("/")
    assert page.status_code == 200 and page.headers["Cache-Control"] == "no-store"
    assert "default-src 'none'" in page.headers["Content-Security-Policy"]
    panel = client.get("/panel").get_data(as_text=True)
    assert panel.startswith("<main id='panel'") and "id='dedup-deliveries'>17<" in panel
    doc = client.get("/status.json").get_json()
    assert doc["dedup"] == {"deliveries": 18, "duplicates": 4, "hit_rate": 4 / 18}
    assert doc["scheduled"]["waiting"] == 7
    assert doc["dead_letters"]["total"] == 3
    assert doc["fifo_groups"][1]["state"] == "BLOCKED at 5"
    assert client.post("/").status_code == 405
    assert client.delete("/status.json").status_code == 405
    # DNS rebinding: a foreign name that resolves to 127.0.0.1 is refused.
    assert client.get("/", headers={"Host": "evil.example:8760"}).status_code == 403
    assert client.get("/status.json", headers={"Host": "127.0.0.1:8760"}).status_code == 200


def test_a_count_that_stopped_at_its_limit_says_at_least() -> None:
    counts = DeadLetterCounts("dl", True, (("fifo_poison", 100),), truncated=True)
    assert counts.total_text == "≥ 100"
    page = render_page(replace(snapshot(), dead_letters=counts), refresh_seconds=2)
    assert "id='dead-letter-total'>≥ 100<" in page
    assert "reasons of a sample of 100" in page
    # Where Cloud Monitoring counts the backlog, that count is the total.
    counted = replace(counts, counted=4321)
    page = render_page(replace(snapshot(), dead_letters=counted), refresh_seconds=2)
    assert "id='dead-letter-total'>4321<" in page and "reasons of a sample of 100" in page


def test_requests_within_the_interval_share_one_snapshot() -> None:
    calls: list[int] = []

    def take() -> StatusSnapshot:
        calls.append(1)
        return snapshot()

    client = create_app(take, min_interval=60).test_client()
    for _ in range(5):
        client.get("/status.json")
    assert len(calls) == 1


class FlakyStore(MemoryStatsStore):
    def __init__(self) -> None:
        super().__init__()
        self.fail = False

    def add(
        self,
        deltas: Mapping[str, int],
        per_minute: Mapping[str, int] | None = None,
        *,
        minute: datetime | None = None,
    ) -> None:
        if self.fail:
            raise ConnectionError("store down")
        super().add(deltas, per_minute, minute=minute)


def test_flusher_writes_deltas_and_keeps_them_when_a_write_fails() -> None:
    metrics, store = Metrics(), FlakyStore()
    flusher = CounterFlusher(metrics, store, interval=3600)
    metrics.increment("deliveries", 3)
    metrics.increment("duplicate")
    assert flusher.flush() == {"deliveries": 3, "duplicate": 1}
    assert flusher.flush() == {}  # nothing grew: no write
    metrics.increment("deliveries", 2)
    store.fail = True
    with pytest.raises(ConnectionError):
        flusher.flush()
    store.fail = False
    metrics.increment("deliveries")
    assert flusher.flush() == {"deliveries": 3}  # the failed delta is not lost
    flusher.start()
    metrics.increment("duplicate")
    flusher.stop()  # a final flush on stop
    assert store.totals() == {"deliveries": 6, "duplicate": 2}
