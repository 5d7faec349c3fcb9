"""The simulation in ``make test``: 2,000 schedules hold the guarantee, and runs are replayable.

Pass or fail never depends on timing: a schedule's outcome is a function of its seed alone.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

from tests.conftest import repo_root
from tests.simulation.faults import BASE_KINDS, EXTRA_KINDS
from tests.simulation.runner import run_many
from tests.simulation.workload import LogicalMessage
from tests.simulation.world import Options, World, run_schedule

SCHEDULES = 2_000
REPLAY_SEED = 7


def test_two_thousand_schedules_hold_the_guarantee() -> None:
    figures = run_many(0, SCHEDULES, workers=2, quiet=True)
    assert figures["schedules"] == SCHEDULES
    failing = figures["failing_seeds"]
    examples = "\n".join(
        f"  seed {e['seed']} [{e['invariant']}] needs {e['faults_needed']}: {e['violations'][:1]}"
        for e in figures["shrunk"]
    )
    assert not failing, (
        f"{figures['schedules_with_violations']} of {SCHEDULES} schedules broke an invariant "
        f"({figures['violations_by_invariant']}); replay one with `make sim SEED=<seed>`:\n"
        f"{examples}"
    )
    # the schedules interleave deeper than one step of one operation inside another: some had
    # three or four operations in flight at once (deep_interleave), suspended at store calls
    assert figures["schedules_overlapping_more_than_two"] > 0, figures["schedules_by_peak_overlap"]


def _digest(seed: int) -> str:
    result = run_schedule(seed, Options(trace_limit=None))
    return hashlib.sha256(f"{result}\n{result.trace}".encode()).hexdigest()


def test_a_seed_replays_identically() -> None:
    assert _digest(REPLAY_SEED) == _digest(REPLAY_SEED)


def test_a_seed_replays_identically_under_another_hash_seed() -> None:
    """No decision depends on set or dict order of strings (PYTHONHASHSEED)."""
    code = f"from tests.simulation.test_simulation import _digest; print(_digest({REPLAY_SEED}))"
    digests = {
        subprocess.run(
            [sys.executable, "-c", code],
            cwd=repo_root(),
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for hash_seed in ("1", "2")
    }
    assert digests == {_digest(REPLAY_SEED)}


def test_opt_in_kinds_leave_the_default_draws_alone() -> None:
    """Enabling issue 24's dimensions never changes what a seed draws by default: the same
    base fault kinds, the default ones and more, the same workload (plus what they add)."""
    for seed in range(50):
        plain = World(seed, Options())
        wide = World(seed, Options(enable=EXTRA_KINDS))
        base = [k for k in plain.plan.enabled if k in BASE_KINDS]
        assert [k for k in wide.plan.enabled if k in BASE_KINDS] == base
        assert set(plain.plan.enabled) <= set(wide.plan.enabled)
        assert wide.plan.heal_at == plain.plan.heal_at
        # the drawn workload is the same; the bursts some dimensions add differ in length
        drawn = [{m.lid for m in w.workload.messages if not _burst(m)} for w in (plain, wide)]
        assert drawn[0] == drawn[1]


def _burst(message: LogicalMessage) -> bool:
    return message.data.endswith(b":burst")


def test_an_opt_in_seed_replays_identically() -> None:
    options = Options(trace_limit=None, enable=EXTRA_KINDS)
    runs = [run_schedule(REPLAY_SEED, options) for _ in range(2)]
    assert runs[0] == runs[1]
    assert runs[0].trace == runs[1].trace
