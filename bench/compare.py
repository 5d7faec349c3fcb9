"""bench/compare: bench/dedup and bench/fifo, baseline commit against the current tree, in one run.

Why: issue 11 asks that the session's changes to the dedup processor and stores and to the FIFO
gate leave the bench/dedup and bench/fifo ratios no worse than before, "within noise, measured
in one run". The machines are shared and noisy (absolute figures move by +-20% between runs), so
figures recorded on another day prove nothing; only the two variants measured side by side on
the same servers in the same run can be compared.

What it does (``python -m bench.compare``; 8 rounds, about 11 minutes on the 2-core machine):

* ``git worktree add`` the baseline commit (default ``ea83caf``, the package layout of issue 12;
  issue 11's figures were taken against ``3ebf939``, before it) under /tmp, removed at the end.
  The measuring code is this tree's bench/, which imports the library by its current module
  paths, so a baseline from before the layout (``9ca2199``) no longer loads.
* Start one set of local servers (Pub/Sub and Firestore emulators, redis-server; loopback only)
  shared by every measurement.
* Each round runs bench/dedup's measurements (claim + complete per backend, 1 and 8 threads;
  ingress per backend and the pass-through, one internal round) and bench/fifo's (consumption
  by number of groups, and unordered) once for BASELINE and once for CURRENT, each in its own
  ``python -I`` subprocess whose ``sys.path`` starts with that tree's ``shared/``; the
  subprocess checks that every ``pubsub_toolkit`` module it loaded comes from there (the venv's
  editable install points at the current tree). The measuring code is this tree's bench/ for
  both variants, so only the library differs. Rounds alternate which variant runs first
  (AB, BA, AB, ...) so that neither always meets the fuller emulator, as bench/dedup rotates.
* The subprocess also counts, client side, what each phase sends to the stores: Redis round
  trips and commands (by name), Firestore RPCs (by method) and document writes, per message.
  Those counts do not depend on the machine's speed (round trips under 8 threads do depend on
  how many callers the coalescer groups, so only the 1-thread and command counts are exact).

Reported per metric: the current / baseline ratio of each round's adjacent pair, its median
over the rounds and its spread (min-max). A metric counts as **worse** only if the median ratio
is below ``1 - tolerance`` (0.05, the spread the README quotes for the bench ratios) *and* every
round's ratio is below 1; **better** symmetrically; anything else is within noise. JSON goes to
``bench/results/compare_dedup_fifo.json``; a table is printed.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import inspect
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BASELINE = "ea83caf"
WORKTREE = Path("/tmp/ptk-baseline")
OUTPUT_NAME = "compare_dedup_fifo"
TOLERANCE = 0.05
KINDS = ("dedup", "fifo")
# Connection set-up commands redis-py sends on every new connection: counted apart, since how
# many connections a pool opens depends on thread timing, not on the library's protocol.
REDIS_SETUP = frozenset({"CLIENT", "HELLO", "AUTH", "SELECT", "PING", "INFO"})
FIRESTORE_RPCS = (
    "get_document",
    "list_documents",
    "create_document",
    "update_document",
    "delete_document",
    "batch_get_documents",
    "begin_transaction",
    "commit",
    "rollback",
    "run_query",
    "run_aggregation_query",
    "batch_write",
)


# --------------------------------------------------------------------------------------------
# Worker: one variant's measurements, in its own interpreter.
# --------------------------------------------------------------------------------------------


class StoreCounter:
    """Counts what this process sends to Redis and Firestore (patched into the client classes)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()

    def add(self, **amounts: int) -> None:
        with self._lock:
            self.counts.update(amounts)

    def add_names(self, prefix: str, names: list[str]) -> None:
        with self._lock:
            for name in names:
                self.counts[f"{prefix}{name}"] += 1

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.counts)

    def install(self) -> None:
        self._install_redis()
        self._install_firestore()

    def _install_redis(self) -> None:
        from redis import connection

        cls = connection.AbstractConnection
        send_packed, send_command, pack_commands = (
            cls.send_packed_command,
            cls.send_command,
            cls.pack_commands,
        )

        def name_of(args: tuple[Any, ...]) -> str:
            first = args[0] if args else b"?"
            text = first.decode() if isinstance(first, bytes) else str(first)
            return text.split()[0].upper() if text.strip() else "?"

        def record(names: list[str]) -> None:
            setup = [n for n in names if n in REDIS_SETUP]
            real = [n for n in names if n not in REDIS_SETUP]
            self.add_names("redis_setup.", setup)
            self.add_names("redis_cmd.", real)
            self.add(redis_commands=len(real))

        def counted_send_command(conn: Any, *args: Any, **kwargs: Any) -> Any:
            name = name_of(args)
            record([name])
            if name not in REDIS_SETUP:
                self.add(redis_round_trips=1)
            conn._ptk_counted = True
            try:
                return send_command(conn, *args, **kwargs)
            finally:
                conn._ptk_counted = False

        def counted_pack_commands(conn: Any, commands: Any) -> Any:
            commands = list(commands)
            record([name_of(tuple(c)) for c in commands])
            return pack_commands(conn, commands)

        def counted_send_packed(conn: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
            if not getattr(conn, "_ptk_counted", False):  # a pipeline's batch: one round trip
                self.add(redis_round_trips=1)
            return send_packed(conn, command, *args, **kwargs)

        cls.send_command = counted_send_command  # type: ignore[method-assign]
        cls.pack_commands = counted_pack_commands  # type: ignore[method-assign]
        cls.send_packed_command = counted_send_packed  # type: ignore[method-assign]

    def _install_firestore(self) -> None:
        from google.cloud.firestore_v1.services.firestore.client import FirestoreClient

        for rpc in FIRESTORE_RPCS:
            original = getattr(FirestoreClient, rpc, None)
            if original is None:
                continue

            def counted(
                client: Any, *args: Any, _rpc: str = rpc, _orig: Any = original, **kwargs: Any
            ) -> Any:
                request = kwargs.get("request", args[0] if args else None)
                writes = request.get("writes") if isinstance(request, dict) else None
                if writes is None and request is not None and not isinstance(request, dict):
                    writes = getattr(request, "writes", None)
                self.add(**{"firestore_rpcs": 1, f"firestore_rpc.{_rpc}": 1})
                if writes:
                    self.add(firestore_writes=len(writes))
                return _orig(client, *args, **kwargs)

            setattr(FirestoreClient, rpc, counted)


def _per_item(before: Counter[str], after: Counter[str], items: int) -> dict[str, float]:
    delta = after - before
    return {name: round(value / items, 4) for name, value in sorted(delta.items())}


def _claim_label(work: Callable[..., object], threads: int, index: int) -> str:
    """Which bench/dedup phase ``rate`` was called for, from the work function's defaults."""
    params = inspect.signature(work).parameters
    if "store" in params and params["store"].default is not inspect.Parameter.empty:
        store = type(params["store"].default).__name__.removesuffix("DedupStore").lower()
        return f"claims.{store}.{threads}t"
    if "prefix" in params and params["prefix"].default is not inspect.Parameter.empty:
        return f"ingress.{str(params['prefix'].default).split('-', 1)[1]}"
    return f"rate.{index}"


def run_dedup(servers: Any, args: argparse.Namespace, counter: StoreCounter) -> dict[str, Any]:
    from bench import dedup

    phases: dict[str, dict[str, Any]] = {}
    real_rate = dedup.rate

    def measured_rate(items: int, work: Callable[[int], object], *, threads: int) -> float:
        label = _claim_label(work, threads, len(phases))
        before = counter.snapshot()
        value = real_rate(items, work, threads=threads)
        phases[label] = {"items": items, "counts": _per_item(before, counter.snapshot(), items)}
        return value

    dedup.rate = measured_rate  # type: ignore[assignment]  # bench_* look it up at call time
    claims = dedup.bench_claims(servers, args.claims)
    ingress = dedup.bench_ingress(servers, args.messages, 1)
    metrics: dict[str, float] = {}
    for backend, figures in claims.items():
        for name, value in figures.items():
            threads = name.removeprefix("claims_per_s_").removesuffix("_threads")
            metrics[f"dedup.claims_per_s.{backend}.{threads}t"] = value
    for variant, value in ingress["msgs_per_s_median"].items():  # type: ignore[attr-defined]
        metrics[f"dedup.ingress_msgs_per_s.{variant}"] = value
    for backend, value in ingress["ratio_to_passthrough"].items():  # type: ignore[attr-defined]
        metrics[f"dedup.ingress_ratio_to_passthrough.{backend}"] = value
    return {"metrics": metrics, "phases": phases}


def run_fifo(servers: Any, args: argparse.Namespace, counter: StoreCounter) -> dict[str, Any]:
    from bench import fifo

    metrics: dict[str, float] = {}
    phases: dict[str, dict[str, Any]] = {}
    runs = [(f"groups_{g}", g, True) for g in args.groups] + [("unordered", 16, False)]
    for label, groups, ordered in runs:
        before = counter.snapshot()
        value = fifo.consume(servers, args.fifo_messages, groups, fifo=ordered)
        phases[f"fifo.{label}"] = {
            "items": args.fifo_messages,
            "counts": _per_item(before, counter.snapshot(), args.fifo_messages),
        }
        metrics[f"fifo.msgs_per_s.{label}"] = round(value, 1)
        print(f"{label}: {value:.1f} msgs/s", flush=True)
    by = {g: metrics[f"fifo.msgs_per_s.groups_{g}"] for g in args.groups}
    if 1 in by and 16 in by:
        metrics["fifo.speedup_16_vs_1_group"] = round(by[16] / by[1], 3)
    if 16 in by:
        metrics["fifo.fifo_16_groups_vs_unordered"] = round(
            by[16] / metrics["fifo.msgs_per_s.unordered"], 3
        )
    return {"metrics": metrics, "phases": phases}


def _loaded_library(shared: Path) -> dict[str, Any]:
    """Loaded pubsub_toolkit modules from outside ``shared``, and a digest of its sources."""
    foreign = []
    for name in sorted(sys.modules):
        if name == "pubsub_toolkit" or name.startswith("pubsub_toolkit."):
            file = getattr(sys.modules[name], "__file__", None)
            if file is not None and not Path(file).resolve().is_relative_to(shared):
                foreign.append(str(file))
    digest = hashlib.sha256()
    for path in sorted((shared / "pubsub_toolkit").rglob("*.py")):
        digest.update(str(path.relative_to(shared)).encode() + b"\0" + path.read_bytes())
    return {"foreign_modules": foreign, "source_sha256": digest.hexdigest()}


def worker(args: argparse.Namespace) -> None:
    shared = (Path(args.tree) / "shared").resolve()
    sys.path[:0] = [str(shared), str(REPO)]  # -I: neither PYTHONPATH nor the script's folder
    import pubsub_toolkit

    library = Path(pubsub_toolkit.__file__).resolve()
    if not library.is_relative_to(shared):
        raise SystemExit(f"pubsub_toolkit imported from {library}, not from {shared}")
    counter = StoreCounter()
    counter.install()
    from bench.common import Servers

    servers = Servers(
        os.environ["PUBSUB_EMULATOR_HOST"], os.environ["FIRESTORE_EMULATOR_HOST"], args.redis_url
    )
    run = run_dedup if args.worker == "dedup" else run_fifo
    result = run(servers, args, counter)
    loaded = _loaded_library(shared)
    if loaded["foreign_modules"]:
        raise SystemExit(f"modules loaded from outside {shared}: {loaded['foreign_modules']}")
    # Relative to the tree it ran from: no machine path in the results.
    where = str(library.relative_to(shared.parent))
    result |= {"pubsub_toolkit_file": where, "library_sha256": loaded["source_sha256"]}
    Path(args.out).write_text(json.dumps(result))


# --------------------------------------------------------------------------------------------
# Driver: worktree, servers, alternating rounds, ratios.
# --------------------------------------------------------------------------------------------


def git(*argv: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(REPO), *argv], check=True, capture_output=True, text=True
    )
    return done.stdout.strip()


def _registered_worktrees() -> set[Path]:
    lines = git("worktree", "list", "--porcelain").splitlines()
    return {Path(line.split(" ", 1)[1]).resolve() for line in lines if line.startswith("worktree ")}


@contextlib.contextmanager
def baseline_worktree(path: Path, commit: str) -> Iterator[Path]:
    """A detached worktree of ``commit`` at ``path``, removed (--force) on exit."""
    if path.resolve() in _registered_worktrees():
        git("worktree", "remove", "--force", str(path))  # left by an interrupted run of ours
    elif path.exists():
        raise SystemExit(f"{path} exists and is not a worktree of this repository; move it away")
    git("worktree", "add", "--detach", str(path), commit)
    try:
        yield path
    finally:
        git("worktree", "remove", "--force", str(path))
        git("worktree", "prune")


def run_worker(
    kind: str, tree: Path, *, redis_url: str, args: argparse.Namespace, logs: Path, tag: str
) -> dict[str, Any]:
    """One variant's measurements in a subprocess of its own (process group), or an error."""
    out = logs / f"{tag}.json"
    log = logs / f"{tag}.log"
    argv = [
        sys.executable,
        "-I",
        str(Path(__file__).resolve()),
        "--worker",
        kind,
        "--tree",
        str(tree),
        "--out",
        str(out),
        "--redis-url",
        redis_url,
        "--claims",
        str(args.claims),
        "--messages",
        str(args.messages),
        "--fifo-messages",
        str(args.fifo_messages),
        "--groups",
        ",".join(map(str, args.groups)),
    ]
    env = {**os.environ, "PYTHONPATH": str(tree / "shared")}  # for the record: -I ignores it
    started = time.perf_counter()
    with log.open("wb") as sink:
        process = subprocess.Popen(
            argv,
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=logs,
            env=env,
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
    return json.loads(out.read_text()) | {"seconds": seconds}


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


def summarise(runs: list[dict[str, Any]], median: Callable[[list[float]], float]) -> dict[str, Any]:
    """Per metric: each round's current/baseline ratio, their median and spread; and counts."""
    pairs: dict[tuple[str, int], dict[str, dict[str, Any]]] = {}
    for run in runs:
        if "error" not in run:
            pairs.setdefault((run["kind"], run["round"]), {})[run["variant"]] = run
    complete = {k: p for k, p in sorted(pairs.items()) if set(p) == {"baseline", "current"}}
    metrics: dict[str, Any] = {}
    for pair in complete.values():
        base, cur = pair["baseline"]["metrics"], pair["current"]["metrics"]
        for name, value in base.items():
            if name in cur and value:
                entry = metrics.setdefault(name, {"baseline": [], "current": [], "ratios": []})
                entry["baseline"].append(value)
                entry["current"].append(cur[name])
                entry["ratios"].append(cur[name] / value)
    for entry in metrics.values():
        ratios, base_values = entry["ratios"], entry["baseline"]
        m, base_median = median(ratios), median(base_values)
        worse = m < 1 - TOLERANCE and max(ratios) < 1
        better = m > 1 + TOLERANCE and min(ratios) > 1
        entry |= {
            "baseline_median": round(base_median, 3),
            "current_median": round(median(entry["current"]), 3),
            "ratio_median": round(m, 3),
            "ratio_min": round(min(ratios), 3),
            "ratio_max": round(max(ratios), 3),
            "ratios": [round(r, 3) for r in ratios],
            # the baseline's own round-to-round spread relative to its median: the noise floor
            "baseline_rel_range": [
                round(min(base_values) / base_median, 3),
                round(max(base_values) / base_median, 3),
            ],
            "verdict": "worse" if worse else "better" if better else "within noise",
        }
    # Store traffic per item: a counter a run never saw was zero there (a one-off SCRIPT LOAD).
    names: dict[str, set[str]] = {}
    for pair in complete.values():
        for run in pair.values():
            for phase, figures in run["phases"].items():
                names.setdefault(phase, {"redis_round_trips", "redis_commands", "firestore_rpcs"})
                names[phase] |= {n for n in figures["counts"] if not n.startswith("redis_setup.")}
    counts: dict[str, Any] = {}
    for phase, phase_names in sorted(names.items()):
        for name in sorted(phase_names):
            slot: dict[str, Any] = {}
            for variant in ("baseline", "current"):
                values = [
                    pair[variant]["phases"].get(phase, {}).get("counts", {}).get(name, 0.0)
                    for pair in complete.values()
                    if phase in pair["baseline"]["phases"] or phase in pair["current"]["phases"]
                ]
                slot[f"{variant}_median"] = round(median(values), 3)
                slot[f"{variant}_range"] = [round(min(values), 3), round(max(values), 3)]
            slot["current_minus_baseline"] = round(
                slot["current_median"] - slot["baseline_median"], 3
            )
            counts.setdefault(phase, {})[name] = slot
    return {"metrics": dict(sorted(metrics.items())), "counts_per_item": counts}


HEADLINE = (
    "dedup.ingress_ratio_to_passthrough.memory",
    "dedup.ingress_ratio_to_passthrough.redis",
    "dedup.ingress_ratio_to_passthrough.firestore",
    "fifo.speedup_16_vs_1_group",
    "fifo.fifo_16_groups_vs_unordered",
)


def print_table(summary: dict[str, Any]) -> None:
    metrics = summary["metrics"]
    print(
        f"\n{'metric':<46} {'baseline':>9} {'current':>9} {'cur/base':>8} {'spread':>13}  verdict"
    )
    order = [m for m in HEADLINE if m in metrics] + [m for m in metrics if m not in HEADLINE]
    for name in order:
        e = metrics[name]
        star = "*" if name in HEADLINE else " "
        spread = f"{e['ratio_min']:.2f}-{e['ratio_max']:.2f}"
        print(
            f"{star}{name:<45} {e['baseline_median']:>9.3f} {e['current_median']:>9.3f} "
            f"{e['ratio_median']:>8.3f} {spread:>13}  {e['verdict']}"
        )
    print("(* = the benches' own ratios; cur/base = median over rounds of each round's pair)")
    print(
        f"\n{'store traffic per message (median)':<46} {'baseline':>9} {'current':>9} {'diff':>8}"
    )
    for phase, figures in summary["counts_per_item"].items():
        for name in ("redis_round_trips", "redis_commands", "firestore_rpcs", "firestore_writes"):
            slot = figures.get(name)
            if slot and (slot["baseline_median"] or slot["current_median"]):
                print(
                    f" {phase + ' ' + name:<45} {slot['baseline_median']:>9.3f} "
                    f"{slot['current_median']:>9.3f} {slot['current_minus_baseline']:>+8.3f}"
                )


def driver(args: argparse.Namespace) -> None:
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from bench.common import local_servers, median, write_result

    started = time.perf_counter()
    baseline_commit = git("rev-parse", f"{args.baseline}^{{commit}}")
    commit_at_start = git("rev-parse", "HEAD")
    dirty = git("status", "--porcelain", "--", "shared/", "bench/").splitlines()
    logs = Path(tempfile.mkdtemp(prefix="ptk-compare-"))
    runs: list[dict[str, Any]] = []
    order: list[str] = []
    with baseline_worktree(WORKTREE, baseline_commit) as tree, local_servers() as servers:
        trees = {"baseline": tree, "current": REPO}
        for round_no in range(args.rounds):
            elapsed = time.perf_counter() - started
            done = len({r["round"] for r in runs})
            if done >= 3 and elapsed / done * (done + 1) > args.budget:
                print(f"stopping after {done} rounds: the next would pass {args.budget:.0f} s")
                break
            variants = ("baseline", "current") if round_no % 2 == 0 else ("current", "baseline")
            order.append("".join(v[0].upper() for v in variants))
            for kind in KINDS:
                for variant in variants:
                    tag = f"r{round_no}-{kind}-{variant}"
                    run = run_worker(
                        kind,
                        trees[variant],
                        redis_url=servers.redis_url,
                        args=args,
                        logs=logs,
                        tag=tag,
                    )
                    run |= {"round": round_no, "kind": kind, "variant": variant}
                    runs.append(run)
                    status = run.get("error", "").splitlines()[0] if "error" in run else "ok"
                    where = f"round {round_no + 1} {kind:<5} {variant:<8}"
                    print(f"{where} {run['seconds']:>6} s  {status}", flush=True)
                    if "error" in run:
                        print(run["error"], file=sys.stderr)
    summary = summarise(runs, median)
    current_digests = {
        r["library_sha256"] for r in runs if r["variant"] == "current" and "error" not in r
    }
    payload = {
        "why": "issue 11: bench/dedup and bench/fifo no worse than before, measured in one run",
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
            "order": order,
            "claims_per_phase": args.claims,
            "ingress_messages_per_variant": args.messages,
            "fifo_messages": args.fifo_messages,
            "fifo_groups": args.groups,
            "tolerance": TOLERANCE,
            "verdict_rule": "worse: median ratio < 1 - tolerance and every round's ratio < 1",
        },
        "wall_seconds": round(time.perf_counter() - started, 1),
        "regressions": [n for n, e in summary["metrics"].items() if e["verdict"] == "worse"],
        **summary,
        "runs": runs,
    }
    path = write_result(OUTPUT_NAME, payload)
    print_table(summary)
    errors = [r for r in runs if "error" in r]
    print(
        f"\n{len(order)} rounds in {payload['wall_seconds']} s; errors: {len(errors)}; "
        f"worse beyond noise: {payload['regressions'] or 'none'}; wrote {path}"
    )
    if payload["current"]["library_changed_during_run"]:  # type: ignore[index]
        print("note: shared/pubsub_toolkit changed during the run; rounds saw different code")
    if errors:
        raise SystemExit(f"worker logs kept in {logs}")
    shutil.rmtree(logs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=BASELINE, help="commit to compare against")
    parser.add_argument("--rounds", type=int, default=8, help="alternating rounds (>= 3)")
    parser.add_argument("--claims", type=int, default=2000, help="keys per claim phase")
    parser.add_argument("--messages", type=int, default=2000, help="ingress messages per variant")
    parser.add_argument("--fifo-messages", type=int, default=1920)
    parser.add_argument(
        "--groups", type=lambda s: [int(g) for g in s.split(",")], default=[1, 4, 16, 64]
    )
    parser.add_argument("--budget", type=float, default=840.0, help="seconds; no round after it")
    parser.add_argument("--worker-timeout", type=float, default=400.0)
    parser.add_argument("--worker", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--tree", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--redis-url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    # SIGTERM unwinds like Ctrl-C: the worker's group, the servers and the worktree are removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    driver(args)


if __name__ == "__main__":
    main()
