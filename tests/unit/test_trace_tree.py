"""`pubsub-toolkit trace KEY`'s tree printer over a hand-written PUBSUB_TOOLKIT_TRACE_FILE."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pubsub_toolkit import attributes as attr
from pubsub_toolkit_cli.cli import main
from pubsub_toolkit_cli.trace_tree import traces_for_key

TRACE = "a" * 32
OTHER = "b" * 32
MS = 1_000_000


def span(
    span_id: str,
    name: str,
    hop: str,
    start_ms: int,
    end_ms: int,
    *,
    parent: str | None = None,
    trace: str = TRACE,
    key: str | None = "order-7",
    kind: str = "CONSUMER",
    links: tuple[str, ...] = (),
    events: tuple[dict[str, Any], ...] = (),
    **attributes: Any,
) -> dict[str, Any]:
    fields = {"pubsub_toolkit.hop": hop, **attributes}
    if key is not None:
        fields["pubsub_toolkit.dedup_key"] = key
    return {
        "trace_id": trace,
        "span_id": span_id.ljust(16, "0"),
        "parent_id": None if parent is None else parent.ljust(16, "0"),
        "name": name,
        "kind": kind,
        "start": start_ms * MS,
        "end": end_ms * MS,
        "attributes": fields,
        "events": list(events),
        "links": [{"trace_id": trace, "span_id": s.ljust(16, "0")} for s in links],
        "status": "UNSET",
    }


# One delayed message: producer -> ingress (a decision event, the task create) -> relay ->
# consumer; written in the order the spans ENDED (children before parents), as the
# exporter writes them, and across "processes" (interleaved with another trace).
SPANS = [
    span("c1", "create delay-queue", "ingress", 120, 130, parent="b1", kind="PRODUCER"),
    span("x1", "send origin", "producer", 5, 6, trace=OTHER, key="another", kind="PRODUCER"),
    span(
        "b1",
        "process origin",
        "ingress",
        100,
        150,
        parent="a1",
        events=(
            {
                "name": "pubsub_toolkit.renumbered_unknown",
                "time": 140 * MS,
                "attributes": {"dedup_key": "order-7", "consumer": "ingress", "message_id": "3"},
            },
        ),
        **{"messaging.message.id": "3", "pubsub_toolkit.outcome": "scheduled"},
    ),
    span(
        "a1",
        "send origin",
        "producer",
        0,
        20,
        kind="PRODUCER",
        **{
            "messaging.destination.name": "origin",
            "pubsub_toolkit.fifo_group": "g",
            "pubsub_toolkit.fifo_seq": 4,
        },
    ),
    span(
        "d1",
        "process delay-queue",
        "relay",
        2100,
        2140,
        parent="c1",
        links=("c1",),
        events=(
            {
                "name": "pubsub_toolkit.released",
                "time": 2130 * MS,
                "attributes": {"dedup_key": "order-7", "hop": 0},
            },
        ),
    ),
    # A span of this trace whose parent never reached the file (its process had no exporter).
    span("z1", "settle final-sub", "consumer", 2200, 2210, parent="ffff", kind="CLIENT"),
]


@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    path = tmp_path / "traces.jsonl"
    lines = [json.dumps(s) for s in SPANS]
    path.write_text("\n".join(lines) + '\n{"trace_id": "torn')  # a half-written last line
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_tree_is_in_causal_order_with_events_and_links(
    trace_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "trace", "order-7", "--file", str(trace_file))
    assert code == 0, err
    lines = out.splitlines()
    body = lines[lines.index(next(x for x in lines if x.startswith("trace "))) :]
    assert body[0].startswith(f"trace {TRACE} (dedup key order-7): 5 spans in 2.210 s")
    assert "hops producer -> ingress -> relay -> consumer" in body[0]
    headlines = [x for x in body[1:] if "|" in x and "↪" not in x]
    assert [h.split(" | ")[0].lstrip("│├└─ ") + " | " + h.split(" | ")[1] for h in headlines] == [
        "producer | send origin",
        "ingress | process origin",
        "ingress | create delay-queue",
        "relay | process delay-queue",
        "consumer | settle final-sub",
    ]
    # Depth: each span is indented one step under its parent.
    assert headlines[0].startswith("producer | send origin | PRODUCER | 20.0 ms | +0.0 ms")
    assert headlines[1].startswith("└─ ingress | process origin | CONSUMER | 50.0 ms | +100.0 ms")
    assert headlines[2].startswith("   └─ ingress | create delay-queue | PRODUCER | 10.0 ms")
    assert headlines[3].startswith("      └─ relay | process delay-queue | CONSUMER | 40.0 ms")
    assert headlines[3].endswith("+2.100 s")
    assert headlines[4].startswith("consumer | settle final-sub | CLIENT")  # a root of its own
    assert "(parent span ffff0000 is not in the file)" in body
    # Attributes, decisions and links on the lines under their span, before its children.
    after = body[body.index(headlines[0]) + 1]
    assert after.strip("│ ") == "destination origin · fifo g #4"
    ingress = body.index(headlines[1])
    assert body[ingress + 1].strip("│ ") == "message id 3 · outcome scheduled"
    assert body[ingress + 2].strip("│ ") == (
        "◆ decision: renumbered_unknown (consumer=ingress, message_id=3)"
    )
    relay = body.index(headlines[3])
    assert body[relay + 1].strip() == (
        "↪ linked to ingress | create delay-queue (span c1000000 - also its parent)"
    )
    assert body[relay + 2].strip() == "◆ decision: released (hop=0)"
    assert "another" not in out and OTHER not in out  # the other trace is not shown


def test_a_trace_is_found_by_a_decision_for_the_key_too() -> None:
    only_event = span(
        "e1",
        "process sweep",
        "consumer",
        0,
        1,
        trace=OTHER,
        key=None,
        events=({"name": "pubsub_toolkit.released", "attributes": {"dedup_key": "order-7"}},),
    )
    found = traces_for_key([*SPANS, only_event], "order-7")
    assert [t[0]["trace_id"] for t in found] == [TRACE, OTHER]  # earliest first
    assert traces_for_key(SPANS, "missing") == []


def test_an_unknown_key_or_a_missing_file_is_one_line_and_exit_1(
    trace_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "trace", "nope", "--file", str(trace_file))
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "no span for dedup key 'nope'" in err
    assert "(6 spans of 2 traces)" in err
    code, out, err = run(capsys, "trace", "order-7", "--file", str(tmp_path / "absent.jsonl"))
    assert code == 1 and err.count("\n") == 1 and "no trace file at" in err
    # A running stack creates its file with the first span: "start the local stack" would send
    # its user the wrong way.
    assert "no span has been written there yet" in err and "start the local stack" not in err


def test_the_default_file_is_trace_file_else_the_local_stacks(
    trace_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("PUBSUB_TOOLKIT_STATE_DIR", str(tmp_path / "no-stack"))
    monkeypatch.delenv("PUBSUB_TOOLKIT_TRACE_FILE", raising=False)
    code, _, err = run(capsys, "trace", "order-7")
    assert code == 1 and "PUBSUB_TOOLKIT_TRACE_FILE is not set and no local stack is running" in err
    monkeypatch.setenv("PUBSUB_TOOLKIT_TRACE_FILE", str(trace_file))
    code, out, _ = run(capsys, "trace", "order-7")
    assert code == 0 and "relay | process delay-queue" in out


def test_the_trace_context_attribute_may_be_sent_but_other_goog_names_may_not() -> None:
    assert not attr.is_reserved_attribute("googclient_traceparent")
    assert attr.is_reserved_attribute("googClient")
    assert attr.is_reserved_attribute("goog_x")
