"""Shrinking a failing schedule: the same seed with fewer fault kinds, while it still fails.

The workload and the deployment are drawn from their own streams of the seed, so disabling a
fault kind keeps the same messages; each kind is dropped in turn, and kept dropped when the
schedule still breaks the same invariant. Cheap (a few dozen reruns of a ~10 ms schedule), and
the trace of the shrunk schedule is usually much shorter to read.
"""

from __future__ import annotations

from dataclasses import replace

from tests.simulation.faults import Kind
from tests.simulation.world import Options, Result, run_schedule


def shrink(
    result: Result,
    options: Options | None = None,
    *,
    invariant: str | None = None,
    passes: int = 2,
) -> Result:
    """The smallest-plan run of ``result.seed`` found that still breaks ``invariant`` (by
    default its first violation's)."""
    if not result.violations:
        return result
    options = options or Options()
    target = invariant or result.violations[0].invariant
    kinds = [Kind(k) for k in result.enabled]
    best = result
    for _ in range(passes):
        changed = False
        for kind in list(kinds):
            trial = [k for k in kinds if k is not kind]
            rerun = run_schedule(result.seed, replace(options, only=tuple(trial)))
            if any(v.invariant == target for v in rerun.violations):
                kinds, best, changed = trial, rerun, True
        if not changed:
            break
    return best
