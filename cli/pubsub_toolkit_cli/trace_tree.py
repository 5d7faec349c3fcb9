"""One message's traces as indented trees: what ``pubsub-toolkit trace KEY`` prints.

The spans come from a ``PUBSUB_TOOLKIT_TRACE_FILE`` (:mod:`pubsub_toolkit._trace_file`: one JSON
object per finished span, from every process of the local stack). :func:`traces_for_key` keeps every
trace with a span (or a decision) for the dedup key; :func:`render_trace` draws one trace as a tree
in causal order - each span under its parent, siblings by start time - with its hop, operation,
kind, duration and start offset, then below it its key attributes, its decisions (span events) and
its links ("↪ linked to ...", such as the relay's release pointing at the task's creation).
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pubsub_toolkit.errors import ToolkitError
from pubsub_toolkit.tracing import DEDUP_KEY, FIFO_GROUP, FIFO_SEQ, HOP

Span = Mapping[str, Any]
OUTCOME = "pubsub_toolkit.outcome"
EVENT_PREFIX = "pubsub_toolkit."
LEGEND = (
    "Each span: hop | operation and destination | kind | duration | start (from the trace's "
    "first span).",
    "Under it: its attributes, ◆ the decisions taken in it, ↪ the span it links to. A span is "
    "indented under the one that caused it; siblings are in start order.",
)
# Attributes shown on a span's first detail line, in this order, with these labels (the FIFO
# group and number go after the message id).
_SHOWN = (
    ("messaging.destination.name", "destination"),
    ("messaging.message.id", "message id"),
    (OUTCOME, "outcome"),
    ("ack", "ack"),
    ("hop_number", "relay hop"),
)
ORDERING_KEY = "messaging.gcp_pubsub.message.ordering_key"
# Event fields left out of a decision's line: the key is the trace's, the rest is log noise.
_QUIET_EVENT_FIELDS = frozenset({"dedup_key", "outcome"})


class TraceFileError(ToolkitError):
    """The trace file is missing, or holds nothing for the key: the message says what to do."""


def load_spans(path: str) -> list[dict[str, Any]]:
    """Every span in ``path``; TraceFileError (one line) if there is no such file."""
    from pubsub_toolkit._trace_file import read_spans

    if not os.path.isfile(path):
        # A running local stack creates its file with the first span, so "no file" is also
        # "nothing traced yet" there - not a stack to start.
        raise TraceFileError(
            f"no trace file at {path}: no span has been written there yet (every part of "
            "`pubsub-toolkit local up` traces into it once a message passes; elsewhere set "
            "PUBSUB_TOOLKIT_TRACING=on and PUBSUB_TOOLKIT_TRACE_FILE), or pass --file PATH"
        )
    return list(read_spans(path))


def _keys(span: Span) -> set[str]:
    found = {span.get("attributes", {}).get(DEDUP_KEY)}
    found.update(e.get("attributes", {}).get("dedup_key") for e in span.get("events", ()))
    return {k for k in found if isinstance(k, str)}


def traces_for_key(spans: Iterable[Span], key: str) -> list[list[Span]]:
    """The traces (each a list of spans) with a span or decision for dedup key ``key``, the
    earliest first."""
    by_trace: dict[str, list[Span]] = defaultdict(list)
    for span in spans:
        by_trace[span["trace_id"]].append(span)
    wanted = [t for t in by_trace.values() if any(key in _keys(s) for s in t)]
    return sorted(wanted, key=lambda t: min(s["start"] for s in t))


def _ms(nanoseconds: float) -> str:
    return f"{nanoseconds / 1e6:.1f} ms"


def _offset(nanoseconds: float) -> str:
    seconds = nanoseconds / 1e9
    return f"+{seconds * 1000:.1f} ms" if seconds < 1 else f"+{seconds:.3f} s"


def _fifo(attributes: Mapping[str, Any]) -> str | None:
    group = attributes.get(FIFO_GROUP)
    if group is None:
        return None
    seq = attributes.get(FIFO_SEQ)
    return f"fifo {group} #{seq}" if seq is not None else f"fifo {group}"


def _label(span: Span) -> str:
    """``hop | name``: how a span is named where another one links to it."""
    return f"{span.get('attributes', {}).get(HOP, '?')} | {span['name']}"


def _headline(span: Span, origin: int) -> str:
    duration = (span["end"] or span["start"]) - span["start"]
    status = "" if span.get("status") in (None, "UNSET", "OK") else f" | {span['status']}"
    return (
        f"{_label(span)} | {span.get('kind', '?')} | {_ms(duration)} | "
        f"{_offset(span['start'] - origin)}{status}"
    )


def _details(span: Span, known: Mapping[str, Span]) -> list[str]:
    attributes = span.get("attributes", {})
    shown = [f"{label} {attributes[name]}" for name, label in _SHOWN if name in attributes]
    fifo = _fifo(attributes)
    at = 2 if "messaging.message.id" in attributes else 1
    if fifo is not None:
        shown.insert(min(at, len(shown)), fifo)
    ordering_key = attributes.get(ORDERING_KEY)
    if ordering_key is not None and ordering_key != attributes.get(FIFO_GROUP):
        shown.append(f"ordering key {ordering_key}")
    lines = [" · ".join(shown)] if shown else []
    for link in span.get("links", ()):
        target = known.get(link["span_id"])
        parent = " - also its parent" if link["span_id"] == span.get("parent_id") else ""
        if link.get("attributes", {}).get("pubsub_toolkit.link") == "released_by":
            parent = " - it released this parked message"
        lines.append(
            f"↪ linked to {_label(target)} (span {link['span_id'][:8]}{parent})"
            if target is not None
            else f"↪ linked to span {link['span_id'][:8]} of trace {link['trace_id'][:8]} "
            "(not in this file)"
        )
    for event in span.get("events", ()):
        name = str(event["name"]).removeprefix(EVENT_PREFIX)
        fields = ", ".join(
            f"{k}={v}"
            for k, v in event.get("attributes", {}).items()
            if k not in _QUIET_EVENT_FIELDS and v not in (None, "None", "")
        )
        lines.append(f"◆ decision: {name}" + (f" ({fields})" if fields else ""))
    return lines


def render_trace(
    trace: Sequence[Span], *, key: str, known: Mapping[str, Span] | None = None
) -> list[str]:
    """One trace as lines of text: a summary, then its spans as a tree. ``known`` (span id ->
    span, of every trace) names the targets of links into other traces."""
    spans = sorted(trace, key=lambda s: (s["start"], s["end"] or 0))
    ids = {s["span_id"]: s for s in spans}
    children: dict[str | None, list[Span]] = defaultdict(list)
    for span in spans:
        parent = span.get("parent_id")
        children[parent if parent in ids else None].append(span)
    origin = spans[0]["start"]
    last = max(s["end"] or s["start"] for s in spans)
    hops = list(dict.fromkeys(str(s.get("attributes", {}).get(HOP, "?")) for s in spans))
    lines = [
        f"trace {spans[0]['trace_id']} (dedup key {key}): {len(spans)} spans in "
        f"{_offset(last - origin).removeprefix('+')}, hops {' -> '.join(hops)}"
    ]
    names = {**(known or {}), **ids}
    seen: set[str] = set()

    def walk(span: Span, prefix: str, connector: str, below: str) -> None:
        seen.add(span["span_id"])
        kids = [k for k in children.get(span["span_id"], []) if k["span_id"] not in seen]
        lines.append(prefix + connector + _headline(span, origin))
        inner = prefix + below
        for detail in _details(span, names):
            lines.append(inner + ("│    " if kids else "     ") + detail)
        for i, kid in enumerate(kids):
            is_last = i == len(kids) - 1
            walk(kid, inner, "└─ " if is_last else "├─ ", "   " if is_last else "│  ")

    for root in children[None]:
        if root.get("parent_id") is not None:
            lines.append(f"(parent span {root['parent_id'][:8]} is not in the file)")
        walk(root, "", "", "")
    return lines


def render(spans: Sequence[Span], key: str, *, source: str) -> list[str]:
    """Every trace for ``key`` in ``spans``, with a legend; TraceFileError if there is none."""
    traces = traces_for_key(spans, key)
    if not traces:
        count = len({s["trace_id"] for s in spans})
        raise TraceFileError(
            f"no span for dedup key {key!r} in {source} ({len(spans)} spans of {count} traces): "
            "check the key, and that PUBSUB_TOOLKIT_TRACING=on where the message went"
        )
    known = {s["span_id"]: s for s in spans}
    lines = [*LEGEND]
    if len(traces) > 1:
        lines.append(f"{len(traces)} traces hold spans for {key} (published more than once?)")
    for trace in traces:
        lines += ["", *render_trace(trace, key=key, known=known)]
    return lines
