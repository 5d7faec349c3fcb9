"""The status page as HTML: one self-contained document, every value escaped.

No external assets (inline CSS, a few lines of inline script). Elements carry stable ids and
``data-*`` attributes (``#fifo-groups tr[data-group=G] td[data-field=parked]``,
``#dead-letters tr[data-reason=R]``, ``#scheduled-count``, ``#dedup-hit-rate``,
``#backlog tr[data-role=final]``, ``#consumers``, ``#lateness-p99``, ``#store-unavailable``,
``svg#chart-deliveries rect[data-minute=HH:MM]``, ...) so tests and scrapers do not depend on
layout; the charts of the last hour are inline SVG (:mod:`.charts`). The page refreshes itself:
the script replaces ``#panel`` - charts included - with a fresh ``/panel`` every few seconds (a
``<noscript>`` meta refresh otherwise).
"""

from __future__ import annotations

from datetime import timedelta
from html import escape

from pubsub_toolkit.attributes import format_time
from pubsub_toolkit_cli.dashboard.card_html import (
    absolute,
    ago,
    backlog_card,
    card,
    consumer_card,
    dead_letter_card,
    dedup_card,
    lateness_card,
    scheduled_card,
    store_card,
)
from pubsub_toolkit_cli.dashboard.charts import render_charts
from pubsub_toolkit_cli.dashboard.snapshot import StatusSnapshot
from pubsub_toolkit_cli.group_status import GroupStatus, next_command, state_text

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
.stale{color:#a33} .unavailable{color:#a33;max-width:22rem} .note{color:#5a6270}
code{font-size:.85rem;background:#eef0f3;padding:.1rem .3rem;border-radius:3px}
#charts,#fifo{margin-bottom:1rem} .charts{display:flex;flex-wrap:wrap;gap:1rem}
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
    """The part that refreshes: ``<main id="panel">`` with every figure; a card whose read
    failed says why and the others draw."""
    taken = snapshot.taken_at
    charts = (
        card("charts", "Last hour", "", snapshot.problem("history"))
        if snapshot.problem("history")
        else render_charts(snapshot.history)
    )
    return (
        f"<main id='panel' data-taken-at='{escape(format_time(taken))}'>"
        f"<div class='meta'>as of <span id='taken-at' title='{absolute(taken)}'>"
        f"{taken.strftime('%H:%M:%S')} UTC</span>, consumer "
        f"<span id='consumer'>{escape(snapshot.consumer)}</span></div>"
        f"<div class='cards'>{store_card(snapshot)}{backlog_card(snapshot)}"
        f"{consumer_card(snapshot)}{dedup_card(snapshot)}{scheduled_card(snapshot)}"
        f"{lateness_card(snapshot)}{dead_letter_card(snapshot)}</div>"
        f"{_groups_section(snapshot)}"  # before the charts: what an operator may act on
        f"{charts}"
        "</main>"
    )


def _groups_section(snapshot: StatusSnapshot) -> str:
    header = (
        "<tr><th>group</th><th>numbers issued</th><th>last processed</th><th>parked</th>"
        "<th>gap since</th><th>state</th><th>next command</th></tr>"
    )
    problem = snapshot.problem("groups")
    if problem is not None:
        rows = (
            f"<tr><td colspan='7' class='unavailable' id='fifo-unavailable'>"
            f"{escape(problem)}</td></tr>"
        )
    else:
        rows = "".join(_group_row(g, snapshot) for g in snapshot.groups) or (
            "<tr><td colspan='7'>(no FIFO groups yet)</td></tr>"
        )
    return (
        "<section id='fifo'><h2>FIFO groups</h2>"
        f"<table id='fifo-groups'>{header}{rows}</table></section>"
    )


def _group_row(g: GroupStatus, snapshot: StatusSnapshot) -> str:
    css = "blocked" if g.blocked_at is not None else "waiting" if g.parked else "ok"
    issued = "-" if g.last_issued is None else str(g.last_issued)
    now = snapshot.taken_at
    gap = (
        "-" if g.oldest_gap_age_s is None else ago(now - timedelta(seconds=g.oldest_gap_age_s), now)
    )
    command = next_command(g, snapshot.consumer)
    shown = "" if command is None else f"<code>{escape(command)}</code>"
    return (
        f"<tr class='{css}' data-group='{escape(g.group)}'>"
        f"<td data-field='group'>{escape(g.group)}</td>"
        f"<td class='num' data-field='last_issued'>{issued}</td>"
        f"<td class='num' data-field='last_processed'>{g.last_processed}</td>"
        f"<td class='num' data-field='parked'>{g.parked}</td>"
        f"<td class='num' data-field='gap_age'>{gap}</td>"
        f"<td data-field='state'>{escape(state_text(g))}</td>"
        f"<td data-field='next'>{shown}</td></tr>"
    )
