"""bench/consumer_calls: a Consumer's function calls and CPU per message at 64 FIFO groups, two
library trees side by side.

Why: issue 26's gate (bench/compare) found the consumer at 64 groups, where it is CPU-bound,
at 0.93-0.96x of the tree before the restructuring. Wall-clock ratios on the shared 2-core
machine move by several percent between runs; the number of Python function calls per message
does not. This script counts them (cProfile, every thread of the process) by function and by
module, for each tree, so the difference shows *where* the new code does more work; and it
times the same workload (``time.process_time``, every thread) old/new alternately for ratios.

The workload (bench/compare_workloads.consume_fed's, with a trivial handler): a ``Consumer``
(concurrency 64) fed through the public ``subscriber=`` stand-in, messages over 64 FIFO groups
(each group's numbers in order), on the memory store and on a real redis-server (started on a
free loopback port, stopped by its process id). After a warm-up of two messages per group, the
counts and the CPU cover the next ``--messages`` (1280: 22 per group in all, about where
bench/compare's 64-group phases end; the work per message grows with a group's recorded keys,
so longer runs measure another regime); the CPU is summed over ``--repeat`` such passes, each
on new groups. Each measurement runs in its own
interpreter (``python -I``, ``sys.path`` starting at the tree's ``shared/``), so only the
library differs; the measuring code is this file's and uses only the public names of
bench/compare_workloads.LIBRARY.

    python -m bench.consumer_calls --old /tmp/p64old [--new .] [--messages 1280]
        [--rounds 3] [--repeat 4] [--backends memory,redis] [--handlers sync,async] [--top 40]
        [--output-name consumer_calls]

(``/tmp/p64old``: ``git archive 602d3ba shared | tar -x -C /tmp/p64old``.) JSON goes to
``bench/results/<output-name>.json``; a summary is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
GROUPS = 64
CONCURRENCY = 64
WARMUP_PER_GROUP = 2
WAIT_SECONDS = 300.0
UNUSED = "127.0.0.1:9"  # loopback discard port: nothing is sent there


# --------------------------------------------------------------------------------------------
# Worker: one tree, one backend, one handler kind, in its own interpreter.
# --------------------------------------------------------------------------------------------


class Profiles:
    """A cProfile profiler in every thread started from now on (and the caller's), whose
    counts can be read at any moment: ``getstats`` runs under the GIL, so a snapshot taken
    while the consumer is idle between batches is consistent."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._profiles: list[cProfile.Profile] = []
        self._own: cProfile.Profile | None = None

    def _add(self) -> cProfile.Profile:
        profile = cProfile.Profile()
        with self._lock:
            self._profiles.append(profile)
        profile.enable()
        return profile

    def install(self) -> None:
        def start(frame: Any, event: str, arg: Any) -> None:
            # Called once, first thing in a new thread: the C profiler replaces this hook.
            self._add()

        threading.setprofile(start)
        self._own = self._add()

    def snapshot(self) -> Counter[str]:
        """Calls so far by function, over every thread; the snapshot's own calls (in the
        caller's thread) are left out."""
        counts: Counter[str] = Counter()
        if self._own is not None:
            self._own.disable()
        with self._lock:
            profiles = list(self._profiles)
        for profile in profiles:
            for entry in profile.getstats():
                counts[_name(entry.code)] += entry.callcount
        if self._own is not None:
            self._own.enable()
        return counts


class Collections:
    """The garbage collector's passes while ``measuring``, by generation, and their time
    (allocations the library makes per message show here, not among its calls)."""

    def __init__(self) -> None:
        self.measuring = False
        self.counts = [0, 0, 0]
        self.seconds = 0.0
        self._started = 0.0

    def install(self) -> None:
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif self.measuring:
            self.counts[info["generation"]] += 1
            self.seconds += time.perf_counter() - self._started


def _name(code: Any) -> str:
    """``module:function`` for a code object (library modules by dotted name, others by
    package), ``~:<builtin>`` for a builtin."""
    if isinstance(code, str):
        return f"~:{code}"
    path = Path(code.co_filename)
    parts = path.parts
    if "pubsub_toolkit" in parts:
        at = len(parts) - 1 - parts[::-1].index("pubsub_toolkit")
        module = ".".join((*parts[at:-1], path.stem))
        if module.endswith(".__init__"):
            module = module.removesuffix(".__init__")
    elif "site-packages" in parts:
        at = parts.index("site-packages")
        module = parts[at + 1] if at + 1 < len(parts) else path.stem
    elif "bench" in parts:
        module = f"bench.{path.stem}"
    else:
        module = f"stdlib.{path.stem}"
    return f"{module}:{code.co_name}:{code.co_firstlineno}"


def worker(args: argparse.Namespace) -> dict[str, Any]:
    """One measurement: warm up, then ``args.messages`` messages; counts or CPU seconds."""
    sys.path.insert(0, str(REPO))
    from bench.compare_workloads import (
        Received,
        StandInSubscriber,
        resolve_library,
        settings_env,
    )

    profiles = Profiles()
    if args.mode == "calls":
        profiles.install()
    collector = Collections()
    collector.install()
    lib = resolve_library()
    answered: list[str] = []
    lock = threading.Lock()
    reached = threading.Condition(lock)

    def done(outcome: str) -> None:
        with reached:
            answered.append(outcome)
            reached.notify_all()

    def wait_for(count: int) -> None:
        with reached:
            if not reached.wait_for(lambda: len(answered) >= count, timeout=WAIT_SECONDS):
                raise RuntimeError(f"only {len(answered)}/{count} answered")

    def sync_handler(message: Any) -> None:
        return None

    async def async_handler(message: Any) -> None:
        await asyncio.sleep(0)

    handler = async_handler if args.handler == "async" else sync_handler
    env = settings_env(args.backend, args.redis_url)
    processor = lib["MessageProcessor"].from_settings(
        lib["Settings"].from_env(env), lib["ConsumerSettings"].from_env(env), handler
    )
    subscriber = StandInSubscriber()
    consumer = lib["Consumer"](
        "projects/calls/subscriptions/fed",
        processor,
        concurrency=CONCURRENCY,
        subscriber=subscriber,
    )
    groups = args.groups
    warmup = WARMUP_PER_GROUP * groups
    per_pass = warmup + args.messages
    total = per_pass * args.repeat
    cpu, delta = 0.0, Counter[str]()
    consumer.start()
    try:
        assert subscriber.callback is not None
        for r in range(args.repeat):
            # Each pass new groups: every pass measures the same stretch of a group's life
            # (the work per message grows with a group's recorded keys, up to their window).
            batch = [
                Received(i, f"p{r}g{i % groups}", i // groups + 1, done) for i in range(per_pass)
            ]
            for received in batch[:warmup]:
                subscriber.callback(received)
            wait_for(r * per_pass + warmup)
            before, started = profiles.snapshot(), time.process_time()
            collector.measuring = True
            for received in batch[warmup:]:
                subscriber.callback(received)
            wait_for((r + 1) * per_pass)
            cpu += time.process_time() - started
            collector.measuring = False
            delta += profiles.snapshot() - before
    finally:
        consumer.stop()
    if answered.count("ack") != total:
        raise RuntimeError(f"not every message acked: {Counter(answered)}")
    if args.mode == "cpu":
        measured = args.messages * args.repeat
        return {
            "cpu_per_message_us": round(cpu / measured * 1e6, 2),
            "gc_per_message_us": round(collector.seconds / measured * 1e6, 2),
            "gc_collections": collector.counts,
        }
    measured = args.messages * args.repeat
    return {"calls": {name: count / measured for name, count in delta.items()}}


# --------------------------------------------------------------------------------------------
# Driver: both trees, both backends; counts once, CPU in alternating rounds.
# --------------------------------------------------------------------------------------------


def run_worker(tree: Path, mode: str, backend: str, handler: str, args: argparse.Namespace) -> Any:
    """This file as a worker for ``tree`` in a fresh interpreter; its JSON answer."""
    command = [
        sys.executable,
        "-I",
        str(Path(__file__).resolve()),
        "--worker",
        "--tree",
        str(tree),
        "--mode",
        mode,
        "--backend",
        backend,
        "--handler",
        handler,
        "--messages",
        str(args.messages),
        "--groups",
        str(args.groups),
        "--repeat",
        str(args.repeat if mode == "cpu" else 1),
        "--redis-url",
        args.redis_url,
    ]
    # The processor builds a Pub/Sub publisher for dead letters (never used here: every
    # message is acked); an emulator address spares it the search for credentials.
    env = os.environ | {"PUBSUB_EMULATOR_HOST": os.environ.get("PUBSUB_EMULATOR_HOST", UNUSED)}
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=600, check=False, env=env
    )
    if done.returncode != 0:
        raise RuntimeError(f"worker {tree} {mode} {backend} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def by_module(calls: dict[str, float]) -> dict[str, float]:
    """Calls per message summed by module (the part before the first ``:``)."""
    modules: dict[str, float] = {}
    for name, count in calls.items():
        module = name.split(":", 1)[0]
        modules[module] = modules.get(module, 0.0) + count
    return modules


def top(values: dict[str, float], n: int) -> dict[str, float]:
    """The ``n`` largest entries, rounded."""
    ranked = sorted(values.items(), key=lambda item: -item[1])[:n]
    return {name: round(value, 3) for name, value in ranked}


def by_function(calls: dict[str, float]) -> dict[str, float]:
    """Calls per message by ``module:function`` (a function's line number dropped, so one
    that stayed where it was but moved within its file still pairs up)."""
    functions: dict[str, float] = {}
    for name, count in calls.items():
        function = name if name.startswith("~:") else name.rsplit(":", 1)[0]
        functions[function] = functions.get(function, 0.0) + count
    return functions


def difference(old: dict[str, float], new: dict[str, float], n: int) -> dict[str, float]:
    """``new - old`` by key, the ``n`` largest in size, rounded."""
    diff = {k: new.get(k, 0.0) - old.get(k, 0.0) for k in set(old) | set(new)}
    ranked = sorted(diff.items(), key=lambda kv: -abs(kv[1]))[:n]
    return {k: round(d, 3) for k, d in ranked if abs(d) >= 0.005}


def compare_calls(old: dict[str, float], new: dict[str, float], n: int) -> dict[str, Any]:
    """Totals, each tree's top modules and functions, and the modules and functions that
    differ most."""
    old_modules, new_modules = by_module(old), by_module(new)
    return {
        "total_per_message": {
            "old": round(sum(old.values()), 2),
            "new": round(sum(new.values()), 2),
        },
        "modules_old": top(old_modules, n),
        "modules_new": top(new_modules, n),
        "module_difference": difference(old_modules, new_modules, n),
        "function_difference": difference(by_function(old), by_function(new), 2 * n),
        "functions_old": top(old, n),
        "functions_new": top(new, n),
    }


def drive(args: argparse.Namespace) -> dict[str, Any]:
    """Counts for each backend and handler, then ``args.rounds`` alternating CPU rounds."""
    trees = {"old": args.old.resolve(), "new": args.new.resolve()}
    results: dict[str, Any] = {}
    for backend in args.backends.split(","):
        for handler in args.handlers.split(","):
            cell = f"{backend}.{handler}"
            calls = {
                v: run_worker(t, "calls", backend, handler, args)["calls"] for v, t in trees.items()
            }
            summary = compare_calls(calls["old"], calls["new"], args.top)
            cpu: dict[str, list[float]] = {"old": [], "new": []}
            order = ["old", "new"]
            for _ in range(args.rounds):
                for variant in order:
                    answer = run_worker(trees[variant], "cpu", backend, handler, args)
                    cpu[variant].append(answer["cpu_per_message_us"])
                order.reverse()  # ABBA: a drifting load hits both alike
            ratios = [o / n for o, n in zip(cpu["old"], cpu["new"], strict=True)]
            summary["cpu_per_message_us"] = cpu
            summary["cpu_ratio_old_over_new"] = {
                "rounds": [round(r, 3) for r in ratios],
                "median": round(statistics.median(ratios), 3),
            }
            results[cell] = summary
            totals = summary["total_per_message"]
            print(
                f"{cell}: calls/msg old {totals['old']} new {totals['new']}; "
                f"CPU old/new (throughput ratio) median {statistics.median(ratios):.3f} {ratios}",
                flush=True,
            )
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, default=Path("/tmp/p64old"))
    parser.add_argument("--new", type=Path, default=REPO)
    parser.add_argument("--messages", type=int, default=1280)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--repeat", type=int, default=4, help="passes (new groups each) per CPU measurement"
    )
    parser.add_argument("--groups", type=int, default=GROUPS)
    parser.add_argument("--backends", default="memory,redis")
    parser.add_argument("--handlers", default="sync,async")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--output-name", default="consumer_calls")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--redis-url", default="")
    # Worker side (this file started by the driver).
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tree", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=("calls", "cpu"), help=argparse.SUPPRESS)
    parser.add_argument("--backend", help=argparse.SUPPRESS)
    parser.add_argument("--handler", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        sys.path.insert(0, str((args.tree / "shared").resolve()))
        print(json.dumps(worker(args)))
        return
    # Stopped by a signal: leave through the `with` below, which stops redis-server.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(1))
    sys.path[:0] = [str(REPO / "local"), str(REPO / "shared")]
    from pubsub_toolkit_local import emulators
    from pubsub_toolkit_local.processes import ServiceGroup, free_port

    with ServiceGroup(Path(tempfile.mkdtemp(prefix="consumer-calls-"))) as group:
        if not args.redis_url:
            port = free_port()
            group.start(emulators.redis_server(port))  # stopped by its pid on exit
            args.redis_url = f"redis://127.0.0.1:{port}/0"
        results = drive(args)
    if not args.no_write:
        sys.path.insert(0, str(REPO))
        from bench.common import write_result

        payload: dict[str, object] = {
            "workload": {
                "groups": args.groups,
                "concurrency": CONCURRENCY,
                "messages": args.messages,
                "warmup_per_group": WARMUP_PER_GROUP,
                "handler": "trivial",
                "rounds": args.rounds,
                "cpu_passes": args.repeat,
            },
            "results": results,
        }
        print(f"wrote {write_result(args.output_name, payload)}")


if __name__ == "__main__":
    main()
