"""Seeds beyond the 100,000 of ``make sim`` that once broke an invariant in the default mix,
replayed so a regression shows in ``make test`` (each is a few hundred milliseconds).

* 230393 - ``2 fifo_order``: g1#1 ran for two messages on one process. A store loss (a
  restart, then a rollback) emptied the group's record; another producer's message without an
  epoch ran at #1; the new epoch's #1 was refused there as a reused number, but the record's
  adoption of that epoch was never written, so a process that had seen the group before the
  loss wrote its old record back, and #1 ran again with another message (fixed in
  ``FifoDeliver._refused``; tests/unit/test_fifo_epoch_adopted_refusal.py).
* 225487 - ``6 rollback_detected``: two parked messages lost silently after a Redis restart.
  A repair whose save was refused unparked, from a record read before, copies that another
  repair had listed again meanwhile; the sequence's restart then found them listed with no
  copy (fixed in ``SeenStore.unpark_unlisted``;
  tests/unit/test_fifo_refused_repair_relisted.py).
"""

from __future__ import annotations

import pytest

from tests.simulation.world import Options, run_schedule

SEEDS = (230393, 225487)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_seed_that_once_broke_an_invariant_holds_it(seed: int) -> None:
    result = run_schedule(seed, Options())
    assert result.violations == (), [str(v) for v in result.violations]
