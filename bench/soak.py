"""bench/soak: tens of thousands of mixed messages through the local stack, and the ledger.

Run with ``make soak`` (or ``python -m bench.soak [--messages N] [--max-minutes M]``). It starts
the whole local stack (Pub/Sub and Firestore emulators, ingress under functions-framework fed by
the emulator's push subscription, the Cloud Tasks emulator, the relay under gunicorn) and a
Consumer on the final topic, then publishes the mixed workload of :mod:`bench.workload` in
waves: duplicates, delays of 1-10 s, FIFO groups numbered by the sequencer and sent shuffled,
contract violations, reused keys and poison messages.

It writes ``bench/results/soak.json`` (ledger, wall time, rate, delay lateness, the machine's
load) and exits non-zero when the ledger does not balance or the run exceeds ``--max-minutes``.
Everything it started is stopped by process group either way (LocalStack does that, also on
SIGTERM/SIGINT).

The pace is set by the Pub/Sub emulator's push delivery: it runs exactly two push loops per
subscription, each pulling one message, POSTing it and waiting for the answer. So ingress sees
at most two requests at once, and the rate is 2 / (ingress latency) - about 75 msgs/s here with
Firestore, 90 with Redis - while ingress itself takes ~250-300 msgs/s given more concurrency.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.common import stop_on_sigterm, write_result
from bench.delay import percentile
from bench.mix import Mix
from bench.workload import RunResult, run_workload
from pubsub_toolkit_local.stack import LocalStack, StackOptions

REPO = Path(__file__).resolve().parent.parent


def mix_for(messages: int, *, groups: int, wave: int, seed: int) -> Mix:
    """The soak's mix: the e2e shares, delays up to 10 s, and about 0.1% bad messages."""
    bad = max(4, messages // 1000)
    return Mix(
        total=messages,
        groups=groups,
        delay_range=(1.0, 10.0),
        invalid=bad,
        mismatched=max(2, bad // 4),
        poison=max(2, bad // 4),
        wave=wave,
        seed=seed,
    )


def _load() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]


def _percentiles(values: list[float]) -> dict[str, object]:
    return {
        "messages": len(values),
        "p50": round(percentile(values, 50), 1) if values else None,
        "p99": round(percentile(values, 99), 1) if values else None,
        "max": round(max(values), 1) if values else None,
        "mean": round(statistics.fmean(values), 1) if values else None,
        "early": sum(1 for v in values if v < 0),
    }


def summary(mix: Mix, result: RunResult, *, backend: str, max_minutes: float) -> dict[str, object]:
    """The JSON document for bench/results/soak.json."""
    ledger = result.ledger
    return {
        "messages": result.published,
        "planned": mix.total,
        "backend": backend,
        "mix": {
            "duplicates": mix.duplicates,
            "delayed_1_10s": mix.delayed,
            "fifo": mix.fifo,
            "fifo_groups": mix.groups,
            "invalid": mix.invalid,
            "mismatched_keys": mix.mismatched,
            "poison": mix.poison,
            "wave": mix.wave,
        },
        "complete": result.complete,
        "wall_s": round(result.wall_s, 1),
        "max_minutes": max_minutes,
        "within_time_bound": result.complete and result.wall_s <= max_minutes * 60,
        "published_msgs_per_s": round(result.published / result.wall_s, 1) if result.wall_s else 0,
        "ledger": {
            "in": ledger.published,
            "delivered": ledger.delivered,
            "deduplicated": ledger.deduplicated,
            "dead_lettered": ledger.dead_lettered,
            "balanced": ledger.balanced,
            "dead_letter_reasons": dict(sorted(ledger.dead_letter_reasons.items())),
            "ingress_duplicate_decisions": ledger.duplicate_decisions,
            "consumer_outcomes": dict(sorted(ledger.consumer_outcomes.items())),
            "fifo_groups_in_order": ledger.fifo_groups_in_order,
            "fifo_groups": ledger.fifo_groups,
            "problems": ledger.problems[:20],
        },
        # At the consumer's handler (what a user sees) and at the final topic (the pipeline's
        # own lateness, without queueing in the consumer that shares the process with publishing).
        "lateness_ms": _percentiles(ledger.lateness_ms),
        "release_lateness_ms": _percentiles(ledger.release_lateness_ms),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000, help="publishes (default 50000)")
    parser.add_argument("--max-minutes", type=float, default=20.0, help="time bound (default 20)")
    parser.add_argument("--backend", choices=("firestore", "redis"), default="firestore")
    parser.add_argument("--groups", type=int, default=20, help="FIFO groups (default 20)")
    parser.add_argument("--wave", type=int, default=2000, help="publishes per wave")
    parser.add_argument("--backlog", type=int, default=4000, help="max copies ahead of ingress")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    stop_on_sigterm()
    mix = mix_for(args.messages, groups=args.groups, wave=args.wave, seed=args.seed)
    work = Path(tempfile.mkdtemp(prefix="pubsub-toolkit-soak-"))
    load_before = _load()
    print(f"soak: {mix.total} messages on {args.backend}, {args.max_minutes} min max; logs: {work}")
    options = StackOptions(project="soak", store_backend=args.backend)
    # The bound covers the run itself; starting the stack (~10 s) is not part of it.
    with LocalStack(options, work, REPO) as stack:
        from google.cloud import firestore

        from pubsub_toolkit.stores.counters.firestore import FirestoreSequenceCounter

        assert stack.topology is not None
        counter = FirestoreSequenceCounter(firestore.Client(project=options.project))
        ingress_log = next(s.log_path for s in stack.group.services if s.name == "ingress")
        result = run_workload(
            topology=stack.topology,
            env={**stack.env, "PUBSUB_TOOLKIT_CONSUMER_ID": "soak-consumer"},
            mix=mix,
            counter=counter,
            ingress_log=ingress_log,
            deadline=time.monotonic() + args.max_minutes * 60,
            backlog=args.backlog,
            progress=lambda line: print(line, flush=True),
        )
    document = summary(mix, result, backend=args.backend, max_minutes=args.max_minutes)
    document["conditions"] = {
        "load_average_before": load_before,
        "load_average_after": _load(),
        "note": "2 shared CPUs; emulators, servers and the soak all run on them",
    }
    path = write_result("soak", document)
    ledger = document["ledger"]
    print(f"wrote {path}")
    print(
        f"{result.published} messages in {result.wall_s:.0f}s "
        f"({document['published_msgs_per_s']} msgs/s); ledger {ledger}; "
        f"lateness {document['lateness_ms']}"
    )
    if not result.ledger.balanced:
        print("FAIL: the ledger does not balance", file=sys.stderr)
        return 1
    if not document["within_time_bound"]:
        print(f"FAIL: not done within {args.max_minutes} minutes", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
