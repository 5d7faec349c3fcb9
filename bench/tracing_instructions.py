"""bench/tracing_instructions: what tracing costs ingress, in instructions per message.

Why: ``bench/tracing.py`` times ingress with tracing on and off, but on these shared 2-core
machines its per-round ratios swing by a third (its own A/A pair shows it). Valgrind's
callgrind counts the instructions a process executes: the same count for the same code and
input, whatever else the machine is doing. So this is the figure that a later change can be
compared with exactly.

Per message = (the count of a run that handles N messages - the count of the same run handling
none) / N, so start-up, imports and the warm-up cancel out. ``PYTHONHASHSEED=0`` for both runs.
Three shapes, the first two ``Ingress.handle`` on one thread with ``bench/tracing.py``'s set-up
and mix:

* ``in_process``: the in-memory dedup store, a recording sink and scheduler: ingress's own work
  and nothing else (the smallest denominator: the lower bound for off / on);
* ``deployed``: publishing through ``PubSubSink`` to the Pub/Sub emulator, ``RedisDedupStore``
  on redis-server (``bench.common.local_servers`` starts them; they run natively, only this
  process runs under valgrind);
* ``sdk_span``: no ingress, the floor under any tracing of it - OpenTelemetry's Python SDK
  alone, per span: ``bare`` (``start_span`` and ``end``, no attributes) and ``conventions``
  (the six attributes a ``process`` span carries, made current and detached again), each with a
  ``BatchSpanProcessor`` and an exporter that drops the spans.

Variants: ``bypassed`` (in-process only: ``off`` with every tracing hook on ingress's path
replaced by the plain call it wraps, as if the toolkit had no tracing - the "no cost when off"
check, in the same tree: the library from before tracing differs in more than the hooks, and its
heap and garbage collection move its count by more than they do); ``off``; ``on_batch`` (the SDK
``TracerProvider``, ``BatchSpanProcessor`` and an exporter that drops the spans: every trace
recorded); ``on_sampled`` (the same with ``ParentBased(TraceIdRatioBased(0.1))``). Reported:
instructions per message, and off / on - the throughput ratio a CPU-bound ingress would see if
every instruction took the same time (they do not quite: it is a count to compare runs with; the
timed ratios are ``bench/tracing.py``'s).

``python -m bench.tracing_instructions`` (in ``make bench-tracing``; about 12 minutes, two
valgrind runs at a time - the deployed shape's two each start their own servers) writes
``bench/results/tracing_instructions.json`` (``--shapes`` runs some; the others keep their
section). Needs valgrind (Debian's ``valgrind``); without it, it says so and exits 2.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHAPES = {"in_process": 1000, "deployed": 300, "sdk_span": 2000}  # messages (spans) per run
VARIANTS = {
    "in_process": ("bypassed", "off", "on_batch", "on_sampled"),
    "deployed": ("off", "on_batch", "on_sampled"),
    "sdk_span": ("bare", "conventions"),
}
# What ingress's process span carries (tracing._messaging), for the sdk_span shape.
CONVENTIONS = {
    "messaging.system": "gcp_pubsub",
    "messaging.operation.type": "process",
    "messaging.destination.name": "origin",
    "pubsub_toolkit.hop": "ingress",
    "messaging.message.id": "123",
    "pubsub_toolkit.dedup_key": "order-1",
}
COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def work(shape: str, variant: str, messages: int) -> None:
    """Worker (under valgrind): a warm-up, then ``messages`` through ingress (none: 0)."""
    from bench import tracing as bench

    if shape == "sdk_span":
        sdk_spans(variant, messages)
        return
    if variant == "bypassed":
        bypass_tracing()
        variant = "off"
    if shape == "in_process":
        bench.configure_logs("json")
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - the decision logs, for the run
        tracer = bench.Tracing(variant)
        bench.measure(variant, tracer, {"workload": "memory", "round": -1, "messages": 200}, "")
        if messages:
            command = {"workload": "memory", "round": 0, "messages": messages}
            bench.measure(variant, tracer, command, "")
        return
    args = argparse.Namespace(logs="json", backends=["redis"])
    with bench.deployed_setup(args) as (make, switched):
        switched.select(variant)
        with bench.quiet():
            warm = bench.deployed_messages(100, "warm")
            bench.deployed_round(make("redis", "warm"), warm, 0, switched)
            if messages:
                run = bench.deployed_messages(messages, "counted")
                bench.deployed_round(make("redis", "counted"), run, 0, switched)
        switched.select("off")


def sdk_spans(variant: str, count: int) -> None:
    """``count`` spans (after 200 to warm up) through the SDK alone, then flushed."""
    from opentelemetry import context, trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from bench.tracing import DroppingExporter

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(DroppingExporter()))  # type: ignore[arg-type]
    tracer = provider.get_tracer("bench")

    def one() -> None:
        if variant == "bare":
            tracer.start_span("process origin").end()
            return
        span = tracer.start_span(
            "process origin", kind=trace.SpanKind.CONSUMER, attributes=CONVENTIONS
        )
        context.detach(context.attach(trace.set_span_in_context(span)))
        span.end()

    for _ in range(200 + count):
        one()
    provider.force_flush()


def bypass_tracing() -> None:
    """Every tracing hook on ingress's path replaced by the plain call it wraps."""
    from pubsub_toolkit import tracing
    from pubsub_toolkit.ingress.pipeline import Ingress

    Ingress.handle = Ingress._handle  # type: ignore[method-assign] - no span around it
    tracing.forwarding = lambda sink, *, hop: sink
    tracing.scheduled = lambda schedule, queue, message, *, hop: schedule(message)
    tracing.decision_event = lambda outcome, fields: None
    tracing.log_fields = lambda project: {}


def count(shape: str, variant: str, messages: int) -> int:
    """Instructions callgrind counted for one worker run."""
    command = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        "-m",
        "bench.tracing_instructions",
        "--worker",
        shape,
        variant,
        str(messages),
    ]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    run = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800, check=False
    )
    found = COLLECTED.search(run.stderr)
    if run.returncode != 0 or found is None:
        raise RuntimeError(f"{shape}/{variant}/{messages} failed:\n{run.stderr[-2000:]}")
    return int(found.group(1))


def per_message(shape: str, variant: str) -> dict[str, Any]:
    messages = SHAPES[shape]
    with ThreadPoolExecutor(2) as pool:  # the empty run and the full one at once
        empty, full = pool.map(lambda n: count(shape, variant, n), (0, messages))
    return {
        "messages": messages,
        "instructions_empty_run": empty,
        "instructions_full_run": full,
        "instructions_per_message": round((full - empty) / messages),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", type=lambda s: s.split(","), default=list(SHAPES))
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        shape, variant, messages = args.worker
        work(shape, variant, int(messages))
        return
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: apt-get install valgrind", file=sys.stderr)
        raise SystemExit(2)
    results: dict[str, Any] = {}
    for shape in args.shapes:
        variants = {v: per_message(shape, v) for v in VARIANTS[shape]}
        results[shape] = {"variants": variants}
        print(f"{shape}:", flush=True)
        for variant, row in variants.items():
            print(f"  {variant:11s} {row['instructions_per_message']:>10,} instructions each")
        if "off" not in variants:  # sdk_span: counts only
            continue
        off = variants["off"]["instructions_per_message"]
        others = [v for v in variants if v != "off"]
        results[shape]["off_over"] = {
            v: round(off / variants[v]["instructions_per_message"], 3) for v in others
        }
        results[shape]["added_per_message"] = {
            v: variants[v]["instructions_per_message"] - off for v in others
        }
        for variant, ratio in results[shape]["off_over"].items():
            print(f"  off / {variant:11s} {ratio}", flush=True)
    from bench.common import RESULTS, write_result
    from bench.compare import git

    commit = git("rev-parse", "--short", "HEAD")
    recorded_at = datetime.now(UTC).isoformat(timespec="seconds")
    for row in results.values():
        row |= {"commit": commit, "recorded_at": recorded_at}
    previous = RESULTS / "tracing_instructions.json"
    # A shape not run this time keeps its section (and says when and on what it was counted).
    shapes = json.loads(previous.read_text())["shapes"] if previous.exists() else {}
    method = (
        "valgrind --tool=callgrind instruction counts of one process, PYTHONHASHSEED=0;"
        " per message = (run with N messages - run with none) / N; Ingress.handle on one"
        " thread; in_process: memory dedup store and recording sink; deployed: PubSubSink"
        " to the Pub/Sub emulator and RedisDedupStore on redis-server (servers native);"
        " sdk_span: the OpenTelemetry SDK alone, per span"
    )
    path = write_result("tracing_instructions", {"method": method, "shapes": shapes | results})
    print(f"wrote {path.relative_to(REPO)}")


if __name__ == "__main__":
    main()
