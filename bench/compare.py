"""bench/compare: bench/dedup, bench/fifo and bench/async_consumer, a baseline commit against the
current tree, in one run.

Why: issue 26 restructures the library (a core without I/O, drivers, stores as primitives) and
asks that ``bench/fifo``, ``bench/dedup`` and ``bench/async_consumer`` show "old vs new in one
run, no ratio worse than 0.95" (issue 11 asked the same of dedup and FIFO). The machines are
shared and noisy (absolute figures move by +-20% between runs), so figures recorded on another
day prove nothing; only the two variants measured side by side on the same servers in the same
run can be compared.

What it does (``python -m bench.compare [--baseline 602d3ba] [--rounds 5]``):

* ``git worktree add`` the baseline commit (default ``602d3ba``, the tree before issue 26's
  restructuring) in a fresh directory under /tmp, removed at the end - also on Ctrl-C, SIGTERM
  or a failure.
* Start one set of local servers (Pub/Sub and Firestore emulators, redis-server; loopback only)
  shared by every measurement, and stop them by process group at the end.
* Each round runs the three workloads of :mod:`bench.compare_workloads` once for BASELINE and
  once for CURRENT, each in its own ``python -I`` subprocess (a process group of its own,
  stopped by that id) whose ``sys.path`` starts with that tree's ``shared/``; the subprocess
  checks that every ``pubsub_toolkit`` module it loaded comes from there. The measuring code
  is this tree's and imports the library only through the public names listed in
  ``compare_workloads.LIBRARY``, so both libraries load it and only the library differs.
  Rounds alternate which variant runs first (AB, BA, AB, ...).
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
    expected = {n for run in runs if "error" not in run for n in run.get("metrics", {})}
    errors = sum(1 for run in runs if "error" in run)
    return {
        "verdict": verdict(metrics, expected, errors, threshold),
        "metrics": metrics,
        "derived": derived,
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


def run_worker(
    kind: str,
    tree: Path,
    *,
    round_no: int,
    redis_url: str,
    sizes: dict[str, int],
    args: argparse.Namespace,
    logs: Path,
    tag: str,
) -> dict[str, Any]:
    """One variant's measurements in a subprocess of its own (process group), or an error."""
    out = logs / f"{tag}.json"
    log = logs / f"{tag}.log"
    argv = [
        sys.executable,
        "-I",
        str(WORKLOADS),
        *("--kind", kind, "--tree", str(tree), "--out", str(out), "--redis-url", redis_url),
        *("--round", str(round_no), "--groups", ",".join(map(str, args.groups))),
        *(arg for name, value in sizes.items() for arg in (f"--{name}", str(value))),
    ]
    started = time.perf_counter()
    with log.open("wb") as sink:
        process = subprocess.Popen(
            argv,
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=logs,
            start_new_session=True,
        )
        try:
            code: int | None = process.wait(timeout=args.worker_timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:  # also on Ctrl-C or SIGTERM, and for threads or children it left behind
            stop_group(process)
    seconds = round(time.perf_counter() - started, 1)
    if code != 0 or not out.exists():
        lines = log.read_text(errors="replace").splitlines()[-15:]
        why = "timed out" if code is None else f"exit code {code}"
        return {"error": f"{why}; last log lines:\n" + "\n".join(lines), "seconds": seconds}
    result: dict[str, Any] = json.loads(out.read_text())
    return result | {"seconds": seconds}


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
    for section in ("metrics", "derived"):
        if section == "derived":
            print("derived ratios within a variant (reported, not gated):")
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
) -> tuple[list[dict[str, Any]], list[str]]:
    """The warm-up rounds (a quarter of the sizes, not counted: the first requests to a fresh
    emulator or Redis are slow), then every round, alternating which variant goes first;
    stops at the budget."""
    started = time.perf_counter()
    runs: list[dict[str, Any]] = []
    order: list[str] = []
    schedule = [(True, n) for n in range(args.warmup)] + [(False, n) for n in range(args.rounds)]
    for warmup, round_no in schedule:
        elapsed = time.perf_counter() - started
        done = len(order)
        if not warmup and done >= 3 and elapsed / done * (done + 1) > args.budget:
            print(f"stopping after {done} rounds: the next would pass {args.budget:.0f} s")
            break
        variants = VARIANTS if round_no % 2 == 0 else VARIANTS[::-1]
        if not warmup:
            order.append("".join(v[0].upper() for v in variants))
        label = f"warm-up {round_no + 1}" if warmup else f"round {round_no + 1}"
        for kind in args.kinds:
            for variant in variants:
                run = run_worker(
                    kind,
                    trees[variant],
                    round_no=round_no,
                    redis_url=redis_url,
                    sizes=sizes_of(args, 4 if warmup else 1),
                    args=args,
                    logs=logs,
                    tag=f"{'w' if warmup else 'r'}{round_no}-{kind}-{variant}",
                )
                run |= {"round": round_no, "kind": kind, "variant": variant}
                if warmup:
                    run |= {"warmup": True}
                runs.append(run)
                status = run["error"].splitlines()[0] if "error" in run else "ok"
                print(f"{label:<9} {kind:<14} {variant:<8} {run['seconds']:>6} s  {status}")
                if "error" in run:
                    print(run["error"], file=sys.stderr)
                sys.stdout.flush()
    return runs, order


def driver(args: argparse.Namespace) -> None:
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from bench.common import local_servers, write_result

    started = time.perf_counter()
    baseline_commit = git("rev-parse", f"{args.baseline}^{{commit}}")
    commit_at_start = git("rev-parse", "HEAD")
    dirty = git("status", "--porcelain", "--", "shared/", "bench/").splitlines()
    logs = Path(tempfile.mkdtemp(prefix="ptk-compare-"))
    keep_logs = False
    try:
        with baseline_worktree(baseline_commit) as tree, local_servers() as servers:
            trees = {"baseline": tree, "current": REPO}
            runs, order = run_rounds(args, trees, servers.redis_url, logs)
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
            "rounds": len(order),
            "warmup_rounds": args.warmup,
            "order": order,
            "kinds": args.kinds,
            "calls_per_dedup_phase": args.claims,
            "ingress_messages_per_variant": args.messages,
            "fifo_messages": args.fifo_messages,
            "fifo_groups": args.groups,
            "async_consumer_messages": args.async_messages,
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
        f"\n{len(order)} rounds in {payload['wall_seconds']} s; failed workers: "
        f"{v['failed_workers']}; missing metrics: {v['missing_metrics'] or 'none'}\n"
        f"worst median ratio: {v['worst_ratio']} ({v['worst_metric']}); "
        f"worst_ratio_ok (>= {args.threshold}): {v['worst_ratio_ok']}; wrote {path}"
    )
    if payload["current"]["library_changed_during_run"]:
        print("note: shared/pubsub_toolkit changed during the run; rounds saw different code")
    if v["failed_workers"]:
        raise SystemExit(1)


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
    parser.add_argument("--label", default="", help="recorded in the JSON, e.g. 'self-test'")
    args = parser.parse_args(argv)
    unknown = set(args.kinds) - set(KINDS)
    if unknown:
        parser.error(f"unknown --kinds {sorted(unknown)}; choose from {','.join(KINDS)}")
    # SIGTERM unwinds like Ctrl-C: the worker's group, the servers and the worktree are removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    driver(args)


if __name__ == "__main__":
    main()
