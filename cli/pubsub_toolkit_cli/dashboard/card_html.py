"""The status page's cards as HTML: one ``<section class='card' id=...>`` each.

A card whose read failed shows why (``<div class='unavailable'>store unreachable: ...</div>``)
instead of its figures; times are relative ("3 min ago") with the absolute time, to the second,
in the ``title`` attribute.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from html import escape

from pubsub_toolkit_cli.dashboard.cards import Unavailable
from pubsub_toolkit_cli.dashboard.monitoring import SubscriptionBacklog
from pubsub_toolkit_cli.dashboard.snapshot import StatusSnapshot


def card(card_id: str, title: str, body: str, problem: str | None) -> str:
    """A card; ``problem`` replaces the figures with its reason."""
    if problem is not None:
        body = f"<div class='unavailable' id='{card_id}-unavailable'>{escape(problem)}</div>"
    return f"<section class='card' id='{card_id}'><h2>{escape(title)}</h2>{body}</section>"


def absolute(moment: datetime) -> str:
    """``2030-01-01 12:00:05 UTC``: to the second."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def duration(seconds: float) -> str:
    """``45 s``, ``3 min``, ``2 h 5 min``, ``3 d``: as an operator reads an age."""
    s = max(int(seconds), 0)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        hours, minutes = divmod(s // 60, 60)
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    return f"{s // 86400} d"


def ago(moment: datetime, now: datetime, *, field: str = "") -> str:
    """``<time title='absolute'>3 min ago</time>``."""
    seconds = (now - moment).total_seconds()
    text = "just now" if seconds < 1 else f"{duration(seconds)} ago"
    hook = f" data-field='{field}'" if field else ""
    return (
        f"<time datetime='{moment.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}' "
        f"title='{absolute(moment)}'{hook}>{text}</time>"
    )


def seconds_text(value: float | None) -> str:
    """A histogram bucket's upper bound as a figure: ``≤ 50 ms``, ``≤ 5 s``, ``> 1 h``."""
    if value is None:
        return "-"
    if math.isinf(value):
        return "> 1 h"
    return f"≤ {value * 1000:g} ms" if value < 1 else f"≤ {value:g} s"


def store_card(snapshot: StatusSnapshot) -> str:
    store = snapshot.store
    body = (
        ""
        if store is None
        else f"<div class='big' id='store-state'>reachable</div><div>{escape(store.backend)}</div>"
    )
    return card("store", "Store", body, snapshot.problem("store"))


def dedup_card(snapshot: StatusSnapshot) -> str:
    d = snapshot.dedup
    rate = d.hit_rate
    rate_text = "-" if rate is None else f"{rate:.1%}"
    rate_value = "" if rate is None else f"{rate:.6f}"
    body = (
        f"<div class='big' id='dedup-hit-rate' data-value='{rate_value}'>{rate_text}</div>"
        f"<div><span id='dedup-duplicates'>{d.duplicates}</span> duplicates of "
        f"<span id='dedup-deliveries'>{d.deliveries}</span> deliveries</div>"
    )
    return card("dedup", "Dedup hit rate at ingress", body, snapshot.problem("dedup"))


def scheduled_card(snapshot: StatusSnapshot) -> str:
    s = snapshot.scheduled
    where = (
        "delays off (PUBSUB_TOOLKIT_TASKS_QUEUE not set)"
        if s.queue is None
        else f"tasks waiting in {escape(s.queue.rsplit('/', 1)[-1])}"
    )
    body = f"<div class='big' id='scheduled-count'>{escape(s.waiting_text)}</div><div>{where}</div>"
    return card("scheduled", "Scheduled deliveries", body, snapshot.problem("scheduled"))


def dead_letter_card(snapshot: StatusSnapshot) -> str:
    d = snapshot.dead_letters
    if not d.exists:
        body = f"<div>no subscription {escape(d.subscription)}</div>"
    elif not d.by_reason:
        body = "<div>none</div>"
    else:
        rows = "".join(
            f"<tr data-reason='{escape(reason)}'><td data-field='reason'>{escape(reason)}</td>"
            f"<td class='num' data-field='count'>{n}</td></tr>"
            for reason, n in d.by_reason
        )
        note = (
            f"<div class='note'>reasons of a sample of {d.sampled}</div>"
            if d.truncated or (d.counted is not None and d.counted > d.sampled)
            else ""
        )
        body = f"<table><tr><th>reason</th><th>count</th></tr>{rows}</table>{note}"
    total = f"<div class='big' id='dead-letter-total'>{escape(d.total_text)}</div>"
    return card("dead-letters", "Dead letters", total + body, snapshot.problem("dead_letters"))


def backlog_card(snapshot: StatusSnapshot) -> str:
    reasons = {b.reason for b in snapshot.backlogs if isinstance(b, Unavailable)}
    if len(reasons) == 1 and all(isinstance(b, Unavailable) for b in snapshot.backlogs):
        return card("backlog", "Subscriptions' backlog", "", reasons.pop())  # said once
    rows = "".join(_backlog_row(b) for b in snapshot.backlogs)
    body = (
        "<table id='backlog-table'><tr><th>subscription</th><th>undelivered</th>"
        f"<th>oldest unacked</th></tr>{rows}</table>"
    )
    return card("backlog", "Subscriptions' backlog", body, None)


def _backlog_row(backlog: SubscriptionBacklog | Unavailable) -> str:
    if isinstance(backlog, Unavailable):
        return (
            f"<tr><td colspan='3' class='unavailable' data-field='unavailable'>"
            f"{escape(backlog.reason)}</td></tr>"
        )
    count = "-" if backlog.undelivered is None else str(backlog.undelivered)
    age = "-" if backlog.oldest_unacked_s is None else duration(backlog.oldest_unacked_s)
    return (
        f"<tr data-role='{escape(backlog.role)}'>"
        f"<td data-field='name'>{escape(backlog.role)}: {escape(backlog.subscription)}</td>"
        f"<td class='num' data-field='undelivered'>{count}</td>"
        f"<td class='num' data-field='oldest_unacked'>{age}</td></tr>"
    )


def consumer_card(snapshot: StatusSnapshot) -> str:
    health = snapshot.consumers
    if health is None or isinstance(health, Unavailable):
        reason = "not read" if health is None else health.reason
        return card("consumers", "Consumers", "", reason)
    window = duration(health.window.total_seconds())
    last = (
        "no decision"
        if health.last_decision_at is None
        else f"last decision {ago(health.last_decision_at, snapshot.taken_at)}"
    )
    alive = health.last_decision_at is not None and (
        snapshot.taken_at - health.last_decision_at < timedelta(minutes=5)
    )
    rate = health.error_rate
    body = (
        f"<div class='big' id='consumers-alive'>{'alive' if alive else 'silent'}</div>"
        f"<div id='consumers-last'>{last}</div>"
        f"<div>error rate <b id='consumers-error-rate'>{'-' if rate is None else f'{rate:.1%}'}"
        f"</b> ({health.errors} of {health.decisions} decisions in {window})</div>"
        f"<div>handler p50 <b id='handler-p50'>{_latency(health.handler_p50_s)}</b>, "
        f"p99 <b id='handler-p99'>{_latency(health.handler_p99_s)}</b></div>"
    )
    return card("consumers", "Consumers", body, None)


def _latency(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def lateness_card(snapshot: StatusSnapshot) -> str:
    h = snapshot.history
    releases = sum(h.releases)
    body = (
        f"<div>p50 <b class='big' id='lateness-p50'>{seconds_text(h.hour_lateness_p50)}</b></div>"
        f"<div>p99 <b class='big' id='lateness-p99'>{seconds_text(h.hour_lateness_p99)}</b></div>"
        f"<div><span id='lateness-releases'>{releases}</span> releases in the last hour</div>"
    )
    return card("lateness", "Delay lateness", body, snapshot.problem("history"))
