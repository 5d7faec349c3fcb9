"""The status page as HTML: one self-contained document, every value escaped.

No external assets (inline CSS, a few lines of inline script). Elements carry stable ids and
``data-*`` attributes (``#fifo-groups tr[data-group=G] td[data-field=parked]``,
``#dead-letters tr[data-reason=R]``, ``#scheduled-count``, ``#dedup-hit-rate``,
``svg#chart-deliveries rect[data-minute=HH:MM]``, ...) so tests and scrapers do not depend on
layout; the charts of the last hour are inline SVG (:mod:`.charts`). The page refreshes itself:
the script replaces ``#panel`` - charts included - with a fresh ``/panel`` every few seconds (a
``<noscript>`` meta refresh otherwise).
"""

from __future__ import annotations

from html import escape

from pubsub_toolkit.attributes import format_time
from pubsub_toolkit.operations.dashboard.charts import render_charts
from pubsub_toolkit.operations.dashboard.snapshot import StatusSnapshot
from pubsub_toolkit.operations.group_status import GroupStatus, state_text

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5rem;color:#1d2330;background:#f6f7f9}
h1{font-size:1.3rem;margin:0 0 .2rem} h2{font-size:1rem;margin:0 0 .5rem}
.meta{color:#5a6270;margin-bottom:1rem}
.cards{display:flex;flex-wrap:wrap;gap:1rem;margin-bottom:1rem}
.card{background:#fff;border:1px solid #d9dde3;border-radius:6px;padding:.8rem 1rem;min-width:12rem}
.big{font-size:1.8rem;font-weight:600}
table{border-collapse:collapse;background:#fff} #fifo-groups{min-width:40rem}
th,td{border:1px solid #d9dde3;padding:.3rem .6rem;text-align:left}
td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.blocked td{background:#fde8e8} tr.waiting td{background:#fff6df}
.stale{color:#a33}
#charts{margin-bottom:1rem} .charts{display:flex;flex-wrap:wrap;gap:1rem}
figure.chart{margin:0;padding:.6rem .8rem}
figure.chart svg{display:block;max-width:100%;height:auto}
figcaption{font-size:.9rem;margin-bottom:.3rem} .legend{margin-left:.6rem;font-weight:600}
.c0{color:#2f6fde} .c1{color:#d1495b} .c2{color:#2a9d8f} .c3{color:#e9a23b} .c4{color:#7b5ea7}
"""

_SCRIPT = """
(function(){
  var every = %d * 1000;
  function refresh(){
    fetch('panel', {cache: 'no-store'}).then(function(r){
      if (!r.ok) { throw new Error('HTTP ' + r.status); }
      return r.text();
    }).then(function(html){
      document.getElementById('panel').outerHTML = html;
      document.getElementById('refresh-state').textContent = '';
    }).catch(function(e){
      document.getElementById('refresh-state').textContent = 'refresh failed: ' + e.message;
    }).finally(function(){ setTimeout(refresh, every); });
  }
  setTimeout(refresh, every);
})();
"""


def render_page(snapshot: StatusSnapshot, *, refresh_seconds: int = 2) -> str:
    """The whole page: head, inline CSS, the panel and the refresh script."""
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        "<title>pubsub-toolkit status</title>"
        f"<noscript><meta http-equiv='refresh' content='{int(refresh_seconds)}'></noscript>"
        f"<style>{_CSS}</style></head><body>"
        "<h1>pubsub-toolkit status</h1>"
        f"<div class='meta'>read-only; refreshes every {int(refresh_seconds)} s "
        "<span id='refresh-state' class='stale'></span></div>"
        f"{render_panel(snapshot)}"
        f"<script>{_SCRIPT % int(refresh_seconds)}</script>"
        "</body></html>\n"
    )


def render_panel(snapshot: StatusSnapshot) -> str:
    """The part that refreshes: ``<main id="panel">`` with every figure."""
    taken = escape(format_time(snapshot.taken_at))
    return (
        f"<main id='panel' data-taken-at='{taken}'>"
        f"<div class='meta'>as of <span id='taken-at'>{taken}</span>, consumer "
        f"<span id='consumer'>{escape(snapshot.consumer)}</span></div>"
        f"<div class='cards'>{_dedup_card(snapshot)}{_scheduled_card(snapshot)}"
        f"{_dead_letter_card(snapshot)}</div>"
        f"{render_charts(snapshot.history)}"
        f"{_groups_section(snapshot.groups)}"
        "</main>"
    )


def _dedup_card(snapshot: StatusSnapshot) -> str:
    d = snapshot.dedup
    rate = d.hit_rate
    rate_text = "-" if rate is None else f"{rate:.1%}"
    rate_value = "" if rate is None else f"{rate:.6f}"
    return (
        "<section class='card' id='dedup'><h2>Dedup hit rate at ingress</h2>"
        f"<div class='big' id='dedup-hit-rate' data-value='{rate_value}'>{rate_text}</div>"
        f"<div><span id='dedup-duplicates'>{d.duplicates}</span> duplicates of "
        f"<span id='dedup-deliveries'>{d.deliveries}</span> deliveries</div></section>"
    )


def _scheduled_card(snapshot: StatusSnapshot) -> str:
    s = snapshot.scheduled
    where = (
        "delays off (TASKS_QUEUE not set)"
        if s.queue is None
        else f"tasks waiting in {escape(s.queue.rsplit('/', 1)[-1])}"
    )
    return (
        "<section class='card' id='scheduled'><h2>Scheduled deliveries</h2>"
        f"<div class='big' id='scheduled-count'>{s.waiting}</div><div>{where}</div></section>"
    )


def _dead_letter_card(snapshot: StatusSnapshot) -> str:
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
        body = f"<table><tr><th>reason</th><th>count</th></tr>{rows}</table>"
    return (
        "<section class='card' id='dead-letters'><h2>Dead letters</h2>"
        f"<div class='big' id='dead-letter-total'>{d.total_text}</div>{body}</section>"
    )


def _groups_section(groups: tuple[GroupStatus, ...]) -> str:
    header = (
        "<tr><th>group</th><th>numbers issued</th><th>last processed</th><th>parked</th>"
        "<th>gap age</th><th>state</th></tr>"
    )
    rows = "".join(_group_row(g) for g in groups) or (
        "<tr><td colspan='6'>(no FIFO groups yet)</td></tr>"
    )
    return (
        "<section id='fifo'><h2>FIFO groups</h2>"
        f"<table id='fifo-groups'>{header}{rows}</table></section>"
    )


def _group_row(g: GroupStatus) -> str:
    css = "blocked" if g.blocked_at is not None else "waiting" if g.parked else "ok"
    issued = "-" if g.last_issued is None else str(g.last_issued)
    gap = "-" if g.oldest_gap_age_s is None else f"{g.oldest_gap_age_s:.0f}s"
    return (
        f"<tr class='{css}' data-group='{escape(g.group)}'>"
        f"<td data-field='group'>{escape(g.group)}</td>"
        f"<td class='num' data-field='last_issued'>{issued}</td>"
        f"<td class='num' data-field='last_processed'>{g.last_processed}</td>"
        f"<td class='num' data-field='parked'>{g.parked}</td>"
        f"<td class='num' data-field='gap_age'>{gap}</td>"
        f"<td data-field='state'>{escape(state_text(g))}</td></tr>"
    )
