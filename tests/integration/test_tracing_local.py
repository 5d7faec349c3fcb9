"""One trace per message across every hop, on the real local stack with PUBSUB_TOOLKIT_TRACING on.

ingress (functions-framework), the Cloud Tasks emulator and the relay (gunicorn) on the session's
emulators, all writing one PUBSUB_TOOLKIT_TRACE_FILE; the producer is ``pubsub-toolkit publish`` and
the consumer ``pubsub-toolkit subscribe`` (each its own process, with the environment ``local env``
prints). One delayed FIFO message goes through, and the file must hold one trace for it from the
producer's send to the consumer's ack, which ``pubsub-toolkit trace`` prints.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pubsub_toolkit._trace_file import read_spans
from pubsub_toolkit_cli.trace_tree import traces_for_key
from pubsub_toolkit_local.stack import LocalStack, RunningEmulators, StackOptions
from tests.conftest import repo_root
from tests.support.waiting import wait_until

pytestmark = pytest.mark.usefixtures("pubsub_emulator", "firestore_emulator")
Span = dict[str, Any]


@pytest.fixture
def stack(project_id: str, tmp_path: Path) -> Iterator[LocalStack]:
    options = StackOptions(
        project=project_id,
        tracing=True,
        emulators=RunningEmulators(
            os.environ["PUBSUB_EMULATOR_HOST"], os.environ["FIRESTORE_EMULATOR_HOST"]
        ),
    )
    with LocalStack(options, tmp_path, repo_root()) as running:
        yield running


def cli(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pubsub_toolkit_cli.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def one(spans: list[Span], hop: str, operation: str) -> Span:
    found = [
        s
        for s in spans
        if s["attributes"].get("pubsub_toolkit.hop") == hop
        and s["attributes"].get("messaging.operation.type") == operation
    ]
    assert len(found) == 1, f"{hop} {operation}: {[s['name'] for s in found]}"
    return found[0]


def ancestors(span: Span, by_id: dict[str, Span]) -> list[str]:
    chain = []
    while span.get("parent_id") in by_id:
        span = by_id[span["parent_id"]]
        chain.append(span["span_id"])
    return chain


def test_one_delayed_fifo_message_is_one_trace_from_send_to_ack(
    stack: LocalStack, unique: str
) -> None:
    key, group = f"traced-{unique}", f"group-{unique}"
    env = {**os.environ, **stack.env, "PUBSUB_TOOLKIT_CONSUMER_ID": f"c-{unique}"}
    assert env["PUBSUB_TOOLKIT_TRACING"] == "on" and env["PUBSUB_TOOLKIT_TRACE_FILE"] == str(
        stack.trace_file
    )
    subscriber = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pubsub_toolkit_cli.cli",
            "subscribe",
            "--max",
            "1",
            "--timeout",
            "60s",
            "--json",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        published = cli(
            env, "publish", "hello", "--dedup-key", key, "--delay", "1s", "--fifo-group", group
        )
        assert published.returncode == 0, published.stderr
        out, err = subscriber.communicate(timeout=90)
    finally:
        if subscriber.poll() is None:
            os.killpg(subscriber.pid, signal.SIGKILL)
            subscriber.wait(timeout=10)
    assert subscriber.returncode == 0, err
    delivered = json.loads(out.splitlines()[0])
    assert delivered["attributes"]["dedup_key"] == key

    def the_trace() -> list[Span] | None:
        traces = traces_for_key(read_spans(str(stack.trace_file)), key)
        done = traces and any(s["name"].startswith("settle") for s in traces[0])
        return traces[0] if done and len(traces) == 1 else None

    spans = wait_until(the_trace, timeout=30, what="the consumer's settle span in the file")
    assert len(traces_for_key(read_spans(str(stack.trace_file)), key)) == 1
    by_id = {s["span_id"]: s for s in spans}
    send = one(spans, "producer", "send")
    chain = [
        send,
        one(spans, "ingress", "process"),
        one(spans, "ingress", "create"),
        one(spans, "relay", "process"),
        one(spans, "consumer", "receive"),
        one(spans, "consumer", "process"),
    ]
    settle = one(spans, "consumer", "settle")
    # Causal order: each span of the chain descends from the one before it, and starts later.
    for before, after in itertools.pairwise(chain):
        assert before["span_id"] in ancestors(after, by_id), (before["name"], after["name"])
        assert before["start"] <= after["start"]
    assert chain[4]["span_id"] in ancestors(settle, by_id)
    assert settle["start"] >= chain[5]["end"]  # acked after it was processed
    # Every span of the trace reaches the producer's send through its parents.
    assert send["parent_id"] is None
    assert all(send["span_id"] in ancestors(s, by_id) for s in spans if s is not send)
    relay = chain[3]
    create = chain[2]
    assert create["span_id"] in {link["span_id"] for link in relay["links"]}
    assert relay["start"] - create["end"] >= 900_000_000  # released when due, 1 s later
    assert create["attributes"]["messaging.destination.name"] == stack.queue.rsplit("/", 1)[1]
    assert chain[1]["attributes"]["pubsub_toolkit.outcome"] == "scheduled"
    assert relay["attributes"]["pubsub_toolkit.outcome"] == "published"
    assert chain[5]["attributes"]["pubsub_toolkit.outcome"] == "processed"
    assert {s["attributes"].get("pubsub_toolkit.fifo_group") for s in chain} == {group}
    assert settle["attributes"]["ack"] is True
    # The handler's message carries the relay's process span on: the trace reaches user code.
    traceparent = delivered["attributes"]["googclient_traceparent"]
    assert traceparent.split("-")[1:3] == [send["trace_id"], relay["span_id"]]
    # Ingress's log lines under the span carry Cloud Logging's trace field with the project.
    ingress_log = (stack.work_dir / "ingress.log").read_text()
    trace_field = f'"logging.googleapis.com/trace": "projects/{stack.options.project}/traces/'
    assert trace_field + send["trace_id"] + '"' in ingress_log

    shown = cli({**env, "PUBSUB_TOOLKIT_TRACE_FILE": str(stack.trace_file)}, "trace", key)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    order = [
        "producer | send origin",
        "ingress | process origin",
        "ingress | create ",
        "relay | process ",
        "consumer | receive ",
        "consumer | process ",
        "consumer | settle ",
    ]
    positions = [next(i for i, x in enumerate(lines) if part in x) for part in order]
    assert positions == sorted(positions), shown.stdout
    assert re.search(r"↪ linked to ingress \| create \S+ \(span [0-9a-f]{8}", shown.stdout)
    assert f"trace {send['trace_id']} (dedup key {key}): {len(spans)} spans" in shown.stdout
