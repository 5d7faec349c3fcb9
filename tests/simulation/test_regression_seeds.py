"""Schedules that once broke the guarantee, replayed on every ``make test``.

``make sim SEEDS=100000`` runs seeds 0-99,999; these were found beyond that range (a longer run
over other seeds) and each broke an invariant on the library of its day. Each is fixed at its
cause in the library with a unit test of its own (or, for a checker that expected more than the
guarantee promises, in the checker with a test of its own); the seed stays here so that the
whole schedule - every fault around the defect - keeps holding as the code changes.
"""

from __future__ import annotations

import pytest

from tests.simulation.faults import Kind
from tests.simulation.world import Options, run_schedule

# seed: what it broke (and the unit test of the fix)
REGRESSIONS = {
    232256: "an effect next to its fifo_poison letter: a poison verdict whose letter timed out "
    "ran the handler again (test_fifo_poison_letter_unconfirmed.py)",
    223215: "a group stalled: a crash's unlisted copy of an ended sequence took the new "
    "sequence's number (test_fifo_epoch_stray_copy.py)",
    230393: "g1#1 ran twice on a process that survived a store loss: a number refused as reused "
    "in an epoch the record adopted only in memory was written back over by a repair "
    "(FifoDeliver._refused; test_fifo_epoch_adopted_refusal.py)",
    225487: "two parked messages lost silently: a refused repair unparked, from an old read, "
    "copies another repair had listed again (SeenStore.unpark_unlisted; "
    "test_fifo_refused_repair_relisted.py)",
    167324: "no_false_alarm (a checker case): a dedup run fenced by a takeover whose claim "
    "landed with an error reply (so no taken_over was logged) - the fenced ALERT is true "
    "(test_fenced_claim_check.py)",
    103165: "fifo_order: a head running past its lease was skipped as a gap older than the "
    "timeout, and its effect came after its successors' (test_fifo_gap_running_head.py)",
    132612: "an effect and a fifo_sequence_restarted letter: a producer's retry of a key that "
    "ran, renumbered and parked behind a gap, was dead-lettered when the group's counter "
    "expired (test_fifo_restart_renumbered_copy.py)",
    164664: "the same as 132612, with batches (test_fifo_restart_renumbered_copy.py)",
    199228: "the same as 132612 (test_fifo_restart_renumbered_copy.py)",
    132734: "dead-lettered twice fifo_sequence_restarted: a key parked at two numbers (the "
    "producer's renumbered retry) when the group's counter expired "
    "(test_fifo_restart_renumbered_copy.py)",
    160824: "L5 lost silently: a new sequence's #1, parked to retry later where the old "
    "sequence's copy lay, was unparked by the old #1's run after its advance "
    "(test_fifo_epoch_late_unpark.py)",
}


@pytest.mark.parametrize("seed", sorted(REGRESSIONS))
def test_a_seed_that_once_broke_the_guarantee_holds(seed: int) -> None:
    result = run_schedule(seed, Options())
    assert result.violations == (), (REGRESSIONS[seed], [str(v) for v in result.violations])


# seed: (the opt-in kinds it runs with, what it broke)
OPT_IN_REGRESSIONS = {
    224000: (
        ("handler_permanent",),
        "dead-lettered twice sim_refused: an operator's dlq replay of a message the consumer had "
        "dead-lettered runs it again (the replay fix), and its handler refused again - the "
        "operator's new attempt (guarantees.md item 7), which the checker excused only in "
        "FIFO groups",
    ),
}


@pytest.mark.parametrize("seed", sorted(OPT_IN_REGRESSIONS))
def test_an_opt_in_seed_that_once_broke_the_guarantee_holds(seed: int) -> None:
    kinds, why = OPT_IN_REGRESSIONS[seed]
    result = run_schedule(seed, Options(enable=tuple(Kind(k) for k in kinds)))
    assert result.violations == (), (why, [str(v) for v in result.violations])
