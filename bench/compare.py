"""bench/compare: bench/dedup, bench/fifo and bench/async_consumer, a baseline commit against the
current tree, in one run.

Why: issue 26 restructures the library (a core without I/O, drivers, stores as primitives) and
asks that ``bench/fifo``, ``bench/dedup`` and ``bench/async_consumer`` show "old vs new in one
run, no ratio worse than 0.95" (issue 11 asked the same of dedup and FIFO). The machines are
shared and noisy (absolute figures move by +-20% between runs), so figures recorded on another
day prove nothing; only the two variants measured side by side on the same servers in the same
run can be compared.

What it does (``python -m bench.compare [--baseline 602d3ba] [--rounds 5]``; about 8 minutes on
the 2-core machine):

* ``git worktree add`` the baseline commit (default ``602d3ba``, the tree before issue 26's
  restructuring) in a fresh directory under /tmp, removed at the end - also on Ctrl-C, SIGTERM
  or a failure.
* Start one set of local servers (Pub/Sub and Firestore emulators, redis-server; loopback only)
  shared by every measurement, and stop them by process group at the end.
* Each round, per workload (dedup, fifo, async_consumer), starts one measuring process per
  variant (``python -I`` :mod:`bench.compare_workloads`, a process group of its own, stopped
  by that id) whose ``sys.path`` starts with that tree's ``shared/``; it checks that every
  ``pubsub_toolkit`` module it loaded comes from there. The driver then asks both for each
  phase (one metric) in turn, back to back, the variant going first alternating phase by phase
  and round by round (ABBA...): the two halves of a pair are seconds apart, so a shared
  machine's changing load hits both alike. The measuring code is this tree's and imports the
  library only through the public names in ``compare_workloads.LIBRARY``, so both libraries
  load it and only the library differs. One warm-up round at a quarter of the sizes comes
  first and is not counted.
* The subprocess also counts, client side, what each phase sends to the stores (Redis round
  trips and commands, Firestore RPCs and writes, per message; for the async consumer the Redis
  server's command count). Those counts do not depend on the machine's speed.

Reported per metric (every metric is a throughput: higher is better): the current / baseline
ratio of each round's adjacent pair, its median over the rounds and its spread. The verdict of
the run is the **minimum median ratio over all metrics** and ``worst_ratio_ok`` = that minimum
>= 0.95 (with every metric measured and no worker failed). Ratios *within* a variant (16 groups
vs 1, FIFO vs unordered, ingress vs pass-through, async vs threaded) are reported as ``derived``
but not gated: a faster 1-group run lowers the 16-vs-1 speedup without anything being worse.
Each metric also gets the noise-aware verdict of issue 11 (worse only if the median ratio is
below 0.95 *and* every round's ratio is below 1). JSON goes to
``bench/results/compare_restructure.json`` (``--output-name``); a table is printed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
WORKLOADS = Path(__file__).resolve().with_name("compare_workloads.py")
BASELINE = "602d3ba"
OUTPUT_NAME = "compare_restructure"
THRESHOLD = 0.95  # issue 26: no ratio worse than 0.95
KINDS = ("dedup", "fifo", "async_consumer")  # compare_workloads.KINDS (kept import-free here)
VARIANTS = ("baseline", "current")

# --------------------------------------------------------------------------------------------
# Pure parts: ratios, medians, the verdict (tests/unit/test_bench_compare.py).
# --------------------------------------------------------------------------------------------


def complete_pairs(runs: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    """(kind, round) -> {"baseline": run, "current": run}, for the timed (not warm-up) pairs
    where both variants succeeded."""
    pairs: dict[tuple[str, int], dict[str, Any]] = {}
    for run in runs:
        if "error" not in run and not run.get("warmup"):
            pairs.setdefault((run["kind"], run["round"]), {})[run["variant"]] = run
    return {k: p for k, p in sorted(pairs.items()) if set(p) == set(VARIANTS)}


def round_ratios(
    pairs: dict[tuple[str, int], dict[str, Any]], section: str = "metrics"
) -> dict[str, dict[str, list[float]]]:
    """Per metric of ``section``: the baseline and current values and each round's ratio
    current / baseline (a round whose baseline is 0 or lacks the metric has no ratio)."""
    table: dict[str, dict[str, list[float]]] = {}
    for pair in pairs.values():
        base, cur = pair["baseline"].get(section, {}), pair["current"].get(section, {})
        for name, value in base.items():
            if name in cur and value:
                entry = table.setdefault(name, {"baseline": [], "current": [], "ratios": []})
                entry["baseline"].append(value)
                entry["current"].append(cur[name])
                entry["ratios"].append(cur[name] / value)
    return dict(sorted(table.items()))


def summarise_metric(entry: dict[str, list[float]], threshold: float = THRESHOLD) -> dict[str, Any]:
    """The median of the per-round ratios, their spread, and the noise-aware verdict."""
    ratios, base = entry["ratios"], entry["baseline"]
    median, base_median = statistics.median(ratios), statistics.median(base)
    worse = median < threshold and max(ratios) < 1
    better = median > 2 - threshold and min(ratios) > 1
    return {
        "baseline": [round(v, 3) for v in base],
        "current": [round(v, 3) for v in entry["current"]],
        "ratios": [round(r, 3) for r in ratios],
        "baseline_median": round(base_median, 3),
        "current_median": round(statistics.median(entry["current"]), 3),
        "ratio_median": round(median, 3),
        "ratio_min": round(min(ratios), 3),
        "ratio_max": round(max(ratios), 3),
        # the baseline's own round-to-round spread relative to its median: the noise floor
        "baseline_rel_range": [round(min(base) / base_median, 3), round(max(base) / base_median, 3)]
        if base_median
        else None,
        "verdict": "worse" if worse else "better" if better else "within noise",
    }


def verdict(
    summaries: dict[str, dict[str, Any]],
    expected: set[str],
    errors: int,
    threshold: float = THRESHOLD,
) -> dict[str, Any]:
    """The run's verdict: the minimum median ratio over all metrics, which metric it is, and
    ``worst_ratio_ok`` - True only if every ``expected`` metric was measured, no worker failed
    and that minimum is >= ``threshold``."""
    missing = sorted(expected - set(summaries))
    worst = min(summaries, key=lambda name: summaries[name]["ratio_median"], default=None)
    worst_ratio = None if worst is None else summaries[worst]["ratio_median"]
    ok = worst_ratio is not None and worst_ratio >= threshold and not missing and errors == 0
    return {
        "threshold": threshold,
        "worst_metric": worst,
        "worst_ratio": worst_ratio,
        "worst_ratio_ok": ok,
        "missing_metrics": missing,
        "failed_workers": errors,
        "below_threshold": sorted(n for n, e in summaries.items() if e["ratio_median"] < threshold),
    }


def store_counts(pairs: dict[tuple[str, int], dict[str, Any]]) -> dict[str, Any]:
    """Store traffic per item by phase: medians and ranges per variant, and their difference.
    A counter a run never saw was zero there (a one-off SCRIPT LOAD)."""
    names: dict[str, set[str]] = {}
    for pair in pairs.values():
        for run in pair.values():
            for phase, figures in run["phases"].items():
                names.setdefault(phase, set())
                names[phase] |= {n for n in figures["counts"] if not n.startswith("redis_setup.")}
    counts: dict[str, Any] = {}
    for phase, phase_names in sorted(names.items()):
        for name in sorted(phase_names):
            slot: dict[str, Any] = {}
            for variant in VARIANTS:
                values = [
                    pair[variant]["phases"].get(phase, {}).get("counts", {}).get(name, 0.0)
                    for pair in pairs.values()
                    if phase in pair["baseline"]["phases"] or phase in pair["current"]["phases"]
                ]
                slot[f"{variant}_median"] = round(statistics.median(values), 3)
                slot[f"{variant}_range"] = [round(min(values), 3), round(max(values), 3)]
            slot["current_minus_baseline"] = round(
                slot["current_median"] - slot["baseline_median"], 3
            )
            counts.setdefault(phase, {})[name] = slot
    return counts


def summarise(runs: list[dict[str, Any]], threshold: float = THRESHOLD) -> dict[str, Any]:
    """Everything the JSON reports about ``runs``: the gated metrics, the verdict, the derived
    (not gated) ratios and the store traffic per item."""
    pairs = complete_pairs(runs)
    metrics = {n: summarise_metric(e, threshold) for n, e in round_ratios(pairs).items()}
    derived = {n: summarise_metric(e, threshold) for n, e in round_ratios(pairs, "derived").items()}
    cpu = {n: summarise_metric(e, threshold) for n, e in round_ratios(pairs, "cpu").items()}
    expected = {n for run in runs if "error" not in run for n in run.get("metrics", {})}
    errors = sum(1 for run in runs if "error" in run)
    return {
        "verdict": verdict(metrics, expected, errors, threshold),
        "metrics": metrics,
        "derived": derived,
        # items per CPU second of the measuring process: barely moved by other processes'
        # load, so on a busy machine the figure that says whether the library costs more
        "cpu_items_per_cpu_s": cpu,
        "counts_per_item": store_counts(pairs),
    }


# --------------------------------------------------------------------------------------------
# Driver: worktree, servers, alternating rounds.
# --------------------------------------------------------------------------------------------


def git(*argv: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(REPO), *argv], check=True, capture_output=True, text=True
    )
    return done.stdout.strip()


@contextlib.contextmanager
def baseline_worktree(commit: str) -> Iterator[Path]:
    """A detached worktree of ``commit`` in a new directory under /tmp, removed on exit (also
    on an exception or Ctrl-C). A fresh directory each run: two runs never share one."""
    path = Path(tempfile.mkdtemp(prefix="ptk-baseline-"))
    try:
        git("worktree", "add", "--detach", str(path), commit)  # into the empty directory
        yield path
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            git("worktree", "remove", "--force", str(path))
        shutil.rmtree(path, ignore_errors=True)
        git("worktree", "prune")


@contextlib.contextmanager
def local_servers() -> Iterator[str]:
    """The Pub/Sub and Firestore emulators and redis-server on loopback (their hosts in this
    process's environment, which the workers inherit); the Redis URL. On exit each is stopped
    by its process group and their directory removed (bench.common's leaves it behind)."""
    from pubsub_toolkit_local import emulators
    from pubsub_toolkit_local.processes import ServiceGroup, free_port

    work = Path(tempfile.mkdtemp(prefix="ptk-compare-servers-"))
    try:
        with ServiceGroup(work) as group:
            ports = free_port(), free_port(), free_port()
            group.start(emulators.pubsub_emulator(ports[0], work))
            group.start(emulators.firestore_emulator(ports[1], work))
            group.start(emulators.redis_server(ports[2]))
            os.environ["PUBSUB_EMULATOR_HOST"] = f"127.0.0.1:{ports[0]}"
            os.environ["FIRESTORE_EMULATOR_HOST"] = f"127.0.0.1:{ports[1]}"
            yield f"redis://127.0.0.1:{ports[2]}/0"
    finally:
        shutil.rmtree(work, ignore_errors=True)


def stop_group(process: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """SIGTERM the worker's process group, SIGKILL it after ``grace``; only the group we started."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except (ProcessLookupError, PermissionError):
            return  # the group is gone (nothing of it is left to stop)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=0.1)
            try:
                os.killpg(process.pid, 0)
            except (ProcessLookupError, PermissionError):
                return


class Worker:
    """One variant's measuring process (``python -I compare_workloads.py``, a process group of
    its own, its output in ``log``), asked for one phase at a time over its stdin/stdout."""

    def __init__(
        self, tree: Path, *, redis_url: str, sizes: dict[str, int], log: Path, timeout: float
    ) -> None:
        argv = [
            sys.executable,
            "-I",
            str(WORKLOADS),
            *("--tree", str(tree), "--redis-url", redis_url),
            *(arg for name, value in sizes.items() for arg in (f"--{name}", str(value))),
        ]
        self.log = log
        self.timeout = timeout
        with log.open("ab") as sink:
            self.process = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=sink,
                cwd=log.parent,
                start_new_session=True,
            )

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        """Send ``request`` (None: just read, for the greeting) and wait for the answer; an
        ``error`` answer if the process died, timed out or said so."""
        process = self.process
        assert process.stdin is not None and process.stdout is not None
        try:
            if request:
                process.stdin.write(json.dumps(request).encode() + b"\n")
                process.stdin.flush()
            ready, _, _ = select.select([process.stdout], [], [], self.timeout)
            line = process.stdout.readline() if ready else b""
        except (BrokenPipeError, OSError) as exc:
            return self._failed(f"{type(exc).__name__}: {exc}")
        if not ready:
            return self._failed(f"no answer within {self.timeout:.0f} s")
        if not line:
            return self._failed(f"exited with code {process.wait()}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def _failed(self, why: str) -> dict[str, Any]:
        tail = self.log.read_text(errors="replace").splitlines()[-15:]
        return {"error": f"{why}; last log lines:\n" + "\n".join(tail)}

    def stop(self) -> None:
        """The process group, stopped (SIGTERM, then SIGKILL): only the group we started."""
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()
        stop_group(self.process)
        if self.process.stdout is not None:
            self.process.stdout.close()


def derive(metrics: dict[str, float], derived: dict[str, float]) -> dict[str, float]:
    """Ratios within one variant's run (the benches' own headline ratios), not gated."""
    out = dict(derived)
    passthrough = derived.get("dedup.ingress_msgs_per_s.passthrough")
    for backend in ("memory", "redis", "firestore"):
        value = metrics.get(f"dedup.ingress_msgs_per_s.{backend}")
        if value and passthrough:
            out[f"dedup.ingress_ratio_to_passthrough.{backend}"] = round(value / passthrough, 3)
    one, sixteen = metrics.get("fifo.msgs_per_s.groups_1"), metrics.get("fifo.msgs_per_s.groups_16")
    unordered = metrics.get("fifo.msgs_per_s.unordered_16")
    if one and sixteen:
        out["fifo.speedup_16_vs_1_group"] = round(sixteen / one, 3)
    if sixteen and unordered:
        out["fifo.fifo_16_groups_vs_unordered"] = round(sixteen / unordered, 3)
    for groups in (1, 16, 64):
        aio = metrics.get(f"async_consumer.msgs_per_s.async.groups_{groups}")
        threaded = metrics.get(f"async_consumer.msgs_per_s.threaded.groups_{groups}")
        if aio and threaded:
            out[f"async_consumer.async_over_threaded.groups_{groups}"] = round(aio / threaded, 3)
    return out


def run_kind(
    kind: str,
    round_no: int,
    trees: dict[str, Path],
    *,
    redis_url: str,
    sizes: dict[str, int],
    args: argparse.Namespace,
    logs: Path,
    label: str,
) -> list[dict[str, Any]]:
    """One round of ``kind``: a worker per variant, started together, then each phase on both,
    back to back, the first variant alternating phase by phase (ABBA...) and round by round:
    a pair is seconds apart, so the machine's load changes little between its two halves."""
    from bench.compare_workloads import phases

    tag = f"{'w' if label.startswith('warm') else 'r'}{round_no}-{kind}"
    runs: dict[str, dict[str, Any]] = {
        v: {"kind": kind, "round": round_no, "variant": v} for v in VARIANTS
    }
    for variant in VARIANTS:
        runs[variant] |= {"metrics": {}, "derived": {}, "cpu": {}, "phases": {}, "seconds": 0.0}
    workers: dict[str, Worker] = {}
    try:
        for variant in VARIANTS:
            log = logs / f"{tag}-{variant}.log"
            timeout = args.worker_timeout
            workers[variant] = Worker(
                trees[variant], redis_url=redis_url, sizes=sizes, log=log, timeout=timeout
            )
        for variant, worker in workers.items():
            greeting = worker.ask({})
            if "error" in greeting:
                runs[variant]["error"] = greeting["error"]
        for index, phase in enumerate(phases(kind, args.groups)):
            first = VARIANTS if (round_no + index) % 2 == 0 else VARIANTS[::-1]
            for variant in first:
                run = runs[variant]
                if "error" in run:
                    continue
                answer = workers[variant].ask({"phase": phase})
                if "error" in answer:
                    run["error"] = f"{phase}: {answer['error']}"
                    continue
                run["metrics"] |= answer["metrics"]
                run["derived"] |= answer["derived"]
                run["cpu"] |= answer["cpu"]
                run["phases"] |= answer["phases"]
                run["seconds"] = round(run["seconds"] + answer["seconds"], 1)
        for variant, worker in workers.items():
            run = runs[variant]
            if "error" in run:
                continue
            end = worker.ask({"quit": True})
            if end.get("foreign_modules") or "error" in end:
                run["error"] = end.get("error") or f"modules from outside: {end['foreign_modules']}"
                continue
            run |= {k: end[k] for k in ("library_sha256", "pubsub_toolkit_file")}
            run["derived"] = derive(run["metrics"], run["derived"])
    finally:  # also on Ctrl-C or SIGTERM: every worker's process group is stopped
        for worker in workers.values():
            worker.stop()
    for variant in VARIANTS:
        run = runs[variant]
        status = run["error"].splitlines()[0] if "error" in run else "ok"
        print(f"{label:<9} {kind:<14} {variant:<8} {run['seconds']:>6} s  {status}")
        if "error" in run:
            print(run["error"], file=sys.stderr)
    sys.stdout.flush()
    return list(runs.values())


def sizes_of(args: argparse.Namespace, divisor: int = 1) -> dict[str, int]:
    """The workers' size arguments, divided by ``divisor`` for the warm-up round."""
    sizes = {
        "claims": args.claims,
        "messages": args.messages,
        "fifo-messages": args.fifo_messages,
        "async-messages": args.async_messages,
    }
    return {name: max(1, value // divisor) for name, value in sizes.items()}


def print_table(summary: dict[str, Any]) -> None:
    print(
        f"\n{'metric':<48} {'baseline':>9} {'current':>9} {'cur/base':>8} {'spread':>11}  verdict"
    )
    titles = {
        "derived": "derived ratios within a variant (reported, not gated):",
        "cpu_items_per_cpu_s": "items per CPU second of the measuring process (not gated; "
        "robust to the machine's load):",
    }
    for section in ("metrics", "derived", "cpu_items_per_cpu_s"):
        if section in titles:
            print(titles[section])
        for name, e in summary[section].items():
            spread = f"{e['ratio_min']:.2f}-{e['ratio_max']:.2f}"
            print(
                f" {name:<47} {e['baseline_median']:>9.3f} {e['current_median']:>9.3f} "
                f"{e['ratio_median']:>8.3f} {spread:>11}  {e['verdict']}"
            )
    print("(cur/base = median over rounds of each round's current/baseline ratio)")
    print(f"\n{'store traffic per item (median)':<48} {'baseline':>9} {'current':>9} {'diff':>8}")
    shown = ("redis_round_trips", "redis_commands", "redis_server_commands", "firestore_rpcs")
    for phase, figures in summary["counts_per_item"].items():
        for name in (*shown, "firestore_writes"):
            slot = figures.get(name)
            if slot and (slot["baseline_median"] or slot["current_median"]):
                print(
                    f" {phase + ' ' + name:<47} {slot['baseline_median']:>9.3f} "
                    f"{slot['current_median']:>9.3f} {slot['current_minus_baseline']:>+8.3f}"
                )


def run_rounds(
    args: argparse.Namespace, trees: dict[str, Path], redis_url: str, logs: Path
) -> tuple[list[dict[str, Any]], int]:
    """The warm-up rounds (a quarter of the sizes, not counted: the first requests to a fresh
    emulator or Redis are slow), then the rounds; stops at the budget. Returns the runs and
    the number of timed rounds."""
    started = time.perf_counter()
    runs: list[dict[str, Any]] = []
    done = 0
    schedule = [(True, n) for n in range(args.warmup)] + [(False, n) for n in range(args.rounds)]
    for warmup, round_no in schedule:
        elapsed = time.perf_counter() - started
        if not warmup and done >= 3 and elapsed / done * (done + 1) > args.budget:
            print(f"stopping after {done} rounds: the next would pass {args.budget:.0f} s")
            break
        for kind in args.kinds:
            batch = run_kind(
                kind,
                round_no,
                trees,
                redis_url=redis_url,
                sizes=sizes_of(args, 4 if warmup else 1),
                args=args,
                logs=logs,
                label=f"warm-up {round_no + 1}" if warmup else f"round {round_no + 1}",
            )
            runs += [run | {"warmup": True} for run in batch] if warmup else batch
        done += 0 if warmup else 1
    return runs, done


def driver(args: argparse.Namespace) -> None:
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from bench.common import write_result
    from bench.compare_workloads import DEDUP_SCALE

    started = time.perf_counter()
    baseline_commit = git("rev-parse", f"{args.baseline}^{{commit}}")
    commit_at_start = git("rev-parse", "HEAD")
    dirty = git("status", "--porcelain", "--", "shared/", "bench/").splitlines()
    logs = Path(tempfile.mkdtemp(prefix="ptk-compare-"))
    keep_logs = False
    try:
        with baseline_worktree(baseline_commit) as tree, local_servers() as redis_url:
            trees = {"baseline": tree, "current": REPO}
            runs, rounds_done = run_rounds(args, trees, redis_url, logs)
        keep_logs = any("error" in r for r in runs)
    finally:
        if keep_logs:
            print(f"worker logs kept in {logs}", file=sys.stderr)
        else:
            shutil.rmtree(logs, ignore_errors=True)
    summary = summarise(runs, args.threshold)
    current_digests = {
        r["library_sha256"] for r in runs if r["variant"] == "current" and "error" not in r
    }
    payload = {
        "why": "issue 26: bench/fifo, bench/dedup and bench/async_consumer, old vs new in one "
        "run, no ratio worse than 0.95",
        "label": args.label,
        "baseline": {"commit": baseline_commit, "tree": "a temporary worktree of that commit"},
        "current": {
            "commit_at_start": commit_at_start,
            "commit_at_end": git("rev-parse", "HEAD"),
            "tree": ".",
            "uncommitted_in_shared_or_bench": dirty,
            # others edit the tree meanwhile: True if the rounds did not all see the same code
            "library_changed_during_run": len(current_digests) > 1,
        },
        "settings": {
            "rounds": rounds_done,
            "warmup_rounds": args.warmup,
            "order": "per phase, the variant going first alternates (ABBA...), round by round",
            "kinds": args.kinds,
            "calls_per_dedup_phase": {b: args.claims * n for b, n in DEDUP_SCALE.items()},
            "ingress_messages_per_variant": args.messages,
            "fifo_messages": args.fifo_messages,  # twice that from 16 groups on
            "fifo_groups": args.groups,
            "async_consumer_messages": args.async_messages,  # twice that from 16 groups on
            "threshold": args.threshold,
            "verdict_rule": "worst_ratio_ok: min over metrics of the median per-round "
            "current/baseline ratio >= threshold, every metric measured, no worker failed",
        },
        "wall_seconds": round(time.perf_counter() - started, 1),
        **summary,
        "runs": runs,
    }
    path = write_result(args.output_name, payload)
    print_table(summary)
    v = summary["verdict"]
    print(
        f"\n{rounds_done} rounds in {payload['wall_seconds']} s; failed workers: "
        f"{v['failed_workers']}; missing metrics: {v['missing_metrics'] or 'none'}\n"
        f"worst median ratio: {v['worst_ratio']} ({v['worst_metric']}); "
        f"worst_ratio_ok (>= {args.threshold}): {v['worst_ratio_ok']}; wrote {path}"
    )
    if payload["current"]["library_changed_during_run"]:
        print("note: shared/pubsub_toolkit changed during the run; rounds saw different code")
    if v["failed_workers"]:
        raise SystemExit(1)
    if args.check and not v["worst_ratio_ok"]:
        raise SystemExit(f"worst median ratio {v['worst_ratio']} < {args.threshold}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=BASELINE, help="commit to compare against")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (>= 3)")
    parser.add_argument(
        "--claims", type=int, default=500, help="keys per dedup phase (x30 memory, x6 Redis)"
    )
    parser.add_argument("--messages", type=int, default=1000, help="ingress messages per variant")
    parser.add_argument("--fifo-messages", type=int, default=960)
    parser.add_argument("--async-messages", type=int, default=640)
    parser.add_argument(
        "--groups", type=lambda s: [int(g) for g in s.split(",")], default=[1, 4, 16, 64]
    )
    parser.add_argument(
        "--kinds",
        type=lambda s: s.split(","),
        default=list(KINDS),
        help="a subset of " + ",".join(KINDS),
    )
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds first (1/4 sizes)")
    parser.add_argument("--threshold", type=float, default=THRESHOLD)
    parser.add_argument("--budget", type=float, default=1800.0, help="seconds; no round after it")
    parser.add_argument("--worker-timeout", type=float, default=600.0)
    parser.add_argument(
        "--output-name",
        default=OUTPUT_NAME,
        help="bench/results/<name>.json (compare_dedup_fifo.json is issue 11's run)",
    )
    parser.add_argument(
        "--check", action="store_true", help="exit non-zero unless worst_ratio_ok (for make)"
    )
    parser.add_argument("--label", default="", help="recorded in the JSON, e.g. 'self-test'")
    args = parser.parse_args(argv)
    unknown = set(args.kinds) - set(KINDS)
    if unknown:
        parser.error(f"unknown --kinds {sorted(unknown)}; choose from {','.join(KINDS)}")
    # SIGTERM unwinds like Ctrl-C: the workers' groups, the servers and the worktree are
    # removed. SIGINT is set explicitly: started in the background (``cmd &``), Python would
    # inherit it ignored, and a Ctrl-C meant for the run would do nothing.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    driver(args)


if __name__ == "__main__":
    main()
