"""Running many schedules (``make sim``) or replaying one, and recording the figures.

* ``run_many(start, count, workers)`` runs seeds ``start .. start+count-1`` on a pool of worker
  processes and aggregates: schedules, schedules with violations by invariant, faults injected
  by kind, events, wall time, schedules per second, and the first failing seeds (each shrunk);
* ``replay(seed)`` runs one seed with its whole trace, shrinks it if it fails, and prints both.

Both write their section of ``bench/results/simulation.json`` (``run`` or ``replay``; the
mutation runs of :mod:`.mutations` write ``mutations``).
"""

from __future__ import annotations

import functools
import json
import multiprocessing
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from tests.simulation.faults import Kind
from tests.simulation.shrink import shrink
from tests.simulation.world import Options, Result, run_schedule

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results" / "simulation.json"
SHRUNK_PER_INVARIANT = 3  # failing seeds shrunk (and kept) per invariant in a bulk run
CHUNK = 25


def _summary(seed: int, options: Options) -> dict[str, Any]:
    result = run_schedule(seed, options)
    out: dict[str, Any] = {
        "seed": seed,
        "shape": result.shape,
        "enabled": list(result.enabled),
        "faults": dict(result.faults),
        "events": result.events,
        "overlap": result.overlap,
        "invariants": sorted({v.invariant for v in result.violations}),
    }
    if result.violations:
        out["violations"] = [str(v) for v in result.violations[:10]]
    return out


def _results(seeds: Iterable[int], workers: int, options: Options) -> Iterator[dict[str, Any]]:
    summary = functools.partial(_summary, options=options)
    if workers <= 1:
        yield from map(summary, seeds)
        return
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        yield from pool.imap_unordered(summary, seeds, chunksize=CHUNK)


def run_many(
    start: int,
    count: int,
    *,
    workers: int = 2,
    quiet: bool = False,
    only: tuple[Kind, ...] | None = None,
    enable: tuple[Kind, ...] = (),
    strict: bool = False,
    forced_shapes: tuple[str, ...] = (),
    one_at_a_time: bool = False,
) -> dict[str, Any]:
    """Run ``count`` schedules from seed ``start`` (``only``: just these fault kinds;
    ``enable``: opt-in kinds drawn too; ``strict``: see ``Options``; ``forced_shapes``: the
    consumer shapes to draw from, see :mod:`.shapes`; ``one_at_a_time``: see ``Options``);
    returns (and prints) the figures."""
    options = Options(
        only=only,
        enable=enable,
        strict=strict,
        shapes=forced_shapes,
        one_at_a_time=one_at_a_time,
    )
    began = time.monotonic()
    faults: Counter[str] = Counter()
    shapes: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    overlaps: Counter[int] = Counter()
    failing_by_kind: Counter[str] = Counter()
    by_invariant: Counter[str] = Counter()
    failing: dict[str, list[int]] = {}
    events = schedules = 0
    examples: dict[int, list[str]] = {}
    for summary in _results(range(start, start + count), workers, options):
        schedules += 1
        shapes[summary["shape"]] += 1
        kinds.update(summary["enabled"])
        if summary["invariants"]:
            failing_by_kind.update(summary["enabled"])
        events += summary["events"]
        overlaps[summary["overlap"]] += 1
        faults.update(summary["faults"])
        for invariant in summary["invariants"]:
            by_invariant[invariant] += 1
            failing.setdefault(invariant, []).append(summary["seed"])
        if summary["invariants"]:
            examples[summary["seed"]] = summary["violations"]
    wall = time.monotonic() - began
    failed = sorted(examples)
    figures: dict[str, Any] = {
        "schedules": schedules,
        "first_seed": start,
        "workers": workers,
        "only_fault_kinds": None if only is None else [k.value for k in only],
        "enabled_opt_in_kinds": [k.value for k in enable],
        "strict": strict,
        "forced_shapes": list(forced_shapes),
        **({"one_at_a_time": True} if one_at_a_time else {}),
        "schedules_by_shape": dict(sorted(shapes.items())),
        "schedules_by_fault_kind": dict(sorted(kinds.items())),
        # how many operations were in flight at once (nested at yield points), at the peak
        "schedules_by_peak_overlap": {str(k): v for k, v in sorted(overlaps.items())},
        "schedules_overlapping_more_than_two": sum(v for k, v in overlaps.items() if k > 2),
        "failing_schedules_by_fault_kind": dict(sorted(failing_by_kind.items())),
        "schedules_with_violations": len(failed),
        "violations_by_invariant": dict(sorted(by_invariant.items())),
        "faults_injected": dict(sorted(faults.items())),
        "events": events,
        "wall_seconds": round(wall, 2),
        "schedules_per_second": round(schedules / wall, 1) if wall else None,
        "failing_seeds": {k: sorted(v)[:20] for k, v in sorted(failing.items())},
        "shrunk": _shrunk_examples(failing, options),
    }
    if not quiet:
        _print_run(figures, examples)
    return figures


def _shrunk_examples(failing: dict[str, list[int]], options: Options) -> list[dict[str, Any]]:
    out = []
    for invariant, seeds in sorted(failing.items()):
        for seed in sorted(seeds)[:SHRUNK_PER_INVARIANT]:
            small = shrink(run_schedule(seed, options), options, invariant=invariant)
            mine = [str(v) for v in small.violations if v.invariant == invariant]
            out.append(
                {
                    "invariant": invariant,
                    "seed": seed,
                    "faults_needed": list(small.enabled),
                    "violations": mine[:3],
                }
            )
    return out


def _print_run(figures: dict[str, Any], examples: dict[int, list[str]]) -> None:
    print(
        f"{figures['schedules']} schedules in {figures['wall_seconds']}s "
        f"({figures['schedules_per_second']}/s on {figures['workers']} workers): "
        f"{figures['schedules_with_violations']} with violations; "
        f"{figures['schedules_overlapping_more_than_two']} had more than two operations in "
        f"flight at once (peak overlap: {figures['schedules_by_peak_overlap']})"
    )
    for invariant, count in figures["violations_by_invariant"].items():
        seeds = figures["failing_seeds"][invariant][:5]
        print(f"  {invariant}: {count} schedules, e.g. seeds {seeds}")
    for example in figures["shrunk"]:
        print(f"  seed {example['seed']} ({example['invariant']}) needs {example['faults_needed']}")
        for line in example["violations"][:2]:
            print(f"      {line}")
    if examples:
        print("replay one with its whole trace: make sim SEED=<seed>")


def replay(seed: int, options: Options | None = None) -> tuple[Result, Result | None]:
    """Run ``seed`` with its whole trace; also shrunk when it fails. Prints both."""
    options = replace(options or Options(), trace_limit=None)
    result = run_schedule(seed, options)
    print(result.trace)
    print(f"\nseed {seed}: {result.messages} messages, {result.events} events")
    print(f"shape {result.shape}; faults enabled: {list(result.enabled)}")
    print(f"injected: {dict(result.faults)}")
    for v in result.violations:
        print(f"VIOLATION {v}")
    small = None
    if result.violations:
        small = shrink(result, options)
        print(f"\nshrunk: the same seed with only {list(small.enabled)} still fails:")
        for v in small.violations:
            print(f"VIOLATION {v}")
        print("its trace:\n" + small.trace)
    else:
        print("no violations")
    return result, small


def write(section: str, figures: dict[str, Any], path: Path = RESULTS) -> None:
    """Store ``figures`` as ``section`` of the results file, keeping the other sections."""
    doc: dict[str, Any] = {}
    if path.exists():
        try:
            doc = json.loads(path.read_text())
        except ValueError:
            doc = {}
    doc[section] = figures
    doc.pop("library", None)  # was a machine path; the results name no paths
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
