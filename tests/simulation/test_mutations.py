"""Every defect fix the simulation can see (issues 11 and 24), reverted, and every hand-made
review bug it can see (issue 24's ``hand_made``), is found within a bound.

See :mod:`tests.simulation.mutations`: each mutation is the revert of one fix; the search runs
seeds 0, 1, 2, ... until a schedule breaks an invariant that the fixed code keeps on that seed.
"""

from __future__ import annotations

import pytest

from tests.simulation.mutations import BOUND, Mutation, mutations, search

# Only the schedule-found ones: a test-guarded mutation runs its (integration) tests in a
# subprocess, which ``make sim-mutations`` does. The few that need hundreds of schedules (each
# run twice: mutated and not) are marked slow - ``make sim-mutations`` and ``make test-slow``
# run them - so that ``make test`` stays within its time.
SLOW = frozenset({"4", "6b", "24.nack"})
SCHEDULE_FOUND = tuple(
    pytest.param(m, marks=pytest.mark.slow) if m.defect in SLOW else m
    for m in mutations()
    if not m.guarded_by
)


@pytest.mark.parametrize("mutation", SCHEDULE_FOUND, ids=lambda m: f"defect-{m.defect}")
def test_the_simulation_finds_the_reverted_fix(mutation: Mutation) -> None:
    found = search(mutation, BOUND)
    assert found["found"], f"defect {mutation.defect} ({mutation.what}) not found: {found}"
