"""Small charts of the last hour as inline SVG, drawn on the server.

No script, no external asset, no ``style`` attribute: inline ``<svg>`` is part of the document,
so the page's strict Content-Security-Policy (``default-src 'none'``) stays as it is. Every
chart is ``svg#chart-NAME`` with ``data-total``/``data-max``; every bar or point carries
``data-minute`` (``HH:MM`` UTC) and ``data-value``, and a ``<title>`` a browser shows on hover,
so tests read the numbers without parsing geometry.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from html import escape

from pubsub_toolkit_cli.dashboard.history import History

WIDTH, HEIGHT = 360, 110
LEFT, RIGHT, TOP, BOTTOM = 34, 4, 6, 16  # margins: axis labels left and below
COLORS = ("#2f6fde", "#d1495b", "#2a9d8f", "#e9a23b", "#7b5ea7")
_PLOT_W, _PLOT_H = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
# Lateness on a log scale: from a millisecond to beyond an hour (the overflow bucket).
_LOG_LOW, _LOG_HIGH = -3.0, math.log10(3600.0) + 0.3


def render_charts(history: History) -> str:
    """The charts section, or nothing before the first history exists."""
    if not history.minutes:
        return ""
    m = history.minutes
    lateness = (
        ("p50", "p50", history.lateness_p50),
        ("p99", "p99", history.lateness_p99),
    )
    backlog = tuple((group, group, values) for group, values in history.backlog)
    return (
        "<section id='charts'><h2>Last hour, per minute (UTC)</h2><div class='charts'>"
        f"{bar_chart('deliveries', 'Deliveries at ingress', m, history.deliveries, COLORS[0])}"
        f"{bar_chart('duplicates', 'Duplicates dropped', m, history.duplicates, COLORS[3])}"
        f"{bar_chart('dead-letters', 'Dead letters', m, history.dead_letters, COLORS[1])}"
        f"{line_chart('lateness', 'Delay lateness', m, lateness, log_seconds=True)}"
        f"{line_chart('backlog', 'Parked per group (busiest)', m, backlog)}"
        "</div></section>"
    )


def bar_chart(
    name: str, title: str, minutes: Sequence[datetime], values: Sequence[int], color: str
) -> str:
    """One bar per minute; the caption shows the hour's total."""
    top = max(values, default=0)
    scale = _PLOT_H / top if top else 0.0
    width = _PLOT_W / max(len(minutes), 1)
    bars = []
    for i, (minute, value) in enumerate(zip(minutes, values, strict=True)):
        height = value * scale
        x, y = LEFT + i * width, TOP + _PLOT_H - height
        label = _hhmm(minute)
        bars.append(
            f"<rect x='{x:.1f}' y='{y:.1f}' width='{max(width - 1, 1):.1f}' "
            f"height='{height:.1f}' fill='{color}' data-minute='{label}' data-value='{value}'>"
            f"<title>{label}: {value}</title></rect>"
        )
    total = sum(values)
    return _figure(
        name,
        f"{escape(title)}: <b id='chart-{name}-total'>{total}</b> in the hour",
        f"data-total='{total}' data-max='{top}'",
        _axes(minutes, str(top), "0") + "".join(bars),
    )


def line_chart(
    name: str,
    title: str,
    minutes: Sequence[datetime],
    series: Sequence[tuple[str, str, Sequence[float | int | None]]],
    *,
    log_seconds: bool = False,
) -> str:
    """One line per series (``(key, label, values)``; a None value breaks the line)."""
    present = [v for _, _, values in series for v in values if v is not None]
    top = max(present, default=0)
    width = _PLOT_W / max(len(minutes), 1)

    def y_of(value: float) -> float:
        if log_seconds:
            clamped = min(max(math.log10(max(value, 1e-3)), _LOG_LOW), _LOG_HIGH)
            share = (clamped - _LOG_LOW) / (_LOG_HIGH - _LOG_LOW)
        else:
            share = value / top if top else 0.0
        return TOP + _PLOT_H - share * _PLOT_H

    groups: list[str] = []
    legend: list[str] = []
    for index, (key, label, values) in enumerate(series):
        color = COLORS[index % len(COLORS)]
        points: list[str] = []
        runs: list[list[str]] = []
        run: list[str] = []
        for i, (minute, value) in enumerate(zip(minutes, values, strict=True)):
            if value is None:
                runs, run = [*runs, run] if run else runs, []
                continue
            x, y = LEFT + (i + 0.5) * width, y_of(value)
            run.append(f"{x:.1f},{y:.1f}")
            shown = _seconds(value) if log_seconds else str(value)
            points.append(
                f"<circle cx='{x:.1f}' cy='{y:.1f}' r='1.8' fill='{color}' "
                f"data-minute='{_hhmm(minute)}' data-value='{value}'>"
                f"<title>{escape(label)} at {_hhmm(minute)}: {shown}</title></circle>"
            )
        runs = [*runs, run] if run else runs
        lines = "".join(
            f"<polyline points='{' '.join(r)}' fill='none' stroke='{color}' stroke-width='1.5'/>"
            for r in runs
        )
        groups.append(f"<g data-series='{escape(key)}'>{lines}{''.join(points)}</g>")
        legend.append(
            f"<span class='legend c{index % len(COLORS)}' data-series='{escape(key)}'>"
            f"{escape(label)}</span>"
        )
    high, low = ("> 1 h", "1 ms") if log_seconds else (_number(top), "0")
    caption = f"{escape(title)} {''.join(legend) or '<span class=legend>(none)</span>'}"
    return _figure(
        name,
        caption,
        f"data-max='{top}' data-series-count='{len(series)}'",
        _axes(minutes, high, low) + "".join(groups),
    )


def _figure(name: str, caption: str, data: str, body: str) -> str:
    return (
        f"<figure class='card chart' id='chart-{name}-card'><figcaption>{caption}</figcaption>"
        f"<svg id='chart-{name}' viewBox='0 0 {WIDTH} {HEIGHT}' width='{WIDTH}' "
        f"height='{HEIGHT}' role='img' aria-label='{name} per minute' {data}>{body}</svg>"
        "</figure>"
    )


def _axes(minutes: Sequence[datetime], high: str, low: str) -> str:
    base, right = TOP + _PLOT_H, LEFT + _PLOT_W
    first = _hhmm(minutes[0]) if minutes else ""
    last = _hhmm(minutes[-1]) if minutes else ""
    return (
        f"<line x1='{LEFT}' y1='{base}' x2='{right}' y2='{base}' stroke='#9aa3ae'/>"
        f"<text x='{LEFT - 3}' y='{TOP + 8}' text-anchor='end' font-size='9' "
        f"fill='#5a6270'>{escape(high)}</text>"
        f"<text x='{LEFT - 3}' y='{base}' text-anchor='end' font-size='9' "
        f"fill='#5a6270'>{escape(low)}</text>"
        f"<text x='{LEFT}' y='{HEIGHT - 3}' font-size='9' fill='#5a6270'>{first}</text>"
        f"<text x='{right}' y='{HEIGHT - 3}' text-anchor='end' font-size='9' "
        f"fill='#5a6270'>{last}</text>"
    )


def _hhmm(minute: datetime) -> str:
    return minute.strftime("%H:%M")


def _seconds(value: float) -> str:
    """A lateness bucket bound as an operator reads it."""
    if math.isinf(value):
        return "> 1 h"
    if value < 1:
        return f"≤ {value * 1000:g} ms"
    return f"≤ {value:g} s"


def _number(value: float) -> str:
    return f"{value:g}"
