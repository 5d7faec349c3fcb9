"""Every defect fix of issue 11, reverted, is found by the simulation within a bound.

See :mod:`tests.simulation.mutations`: each mutation is the revert of one fix; the search runs
seeds 0, 1, 2, ... until a schedule breaks an invariant that the fixed code keeps on that seed.
"""

from __future__ import annotations

import pytest

from tests.simulation.mutations import BOUND, Mutation, mutations, search


@pytest.mark.parametrize("mutation", mutations(), ids=lambda m: f"defect-{m.defect}")
def test_the_simulation_finds_the_reverted_fix(mutation: Mutation) -> None:
    found = search(mutation, BOUND)
    assert found["found"], f"defect {mutation.defect} ({mutation.what}) not found: {found}"
