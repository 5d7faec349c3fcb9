"""Invariant 7's own-lease check (``invariants._fenced_by_itself``) on hand-made ledgers.

A run the gate says was taken over ("lease T was taken over (now N)") by a lease N its own
process wrote is a false ALERT - except in the two cases the 100,000-schedule run of issue 24
found (seeds 44601 and 51255):

* the run was taken over by ANOTHER process first (its repair after a store loss fenced the
  run's lease), and the token the ALERT names is only the newest one, written later by this
  process's own repair (which rightly no longer keeps a lease that was fenced);
* this process's repair moved the run's own live lease to token N (same expiry) and that save
  timed out after it landed: the process never heard of the move, so token N was not its run's
  as far as it could know.

Still caught: the repair's move answered and then ignored (mutation 24.3), and a process that
takes over its own run (mutation 24.busy).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from tests.simulation.invariants import _fenced_by_itself
from tests.simulation.ledger import Decision, Ledger

T0 = datetime(2030, 1, 1, tzinfo=UTC)
RUN = "consumer0#0"
OTHER = "consumer1#0"


def _state(token: int, until: datetime | None) -> Any:
    return SimpleNamespace(lease_token=token, lease_until=until)


def _write(
    ledger: Ledger,
    process: str,
    before: int,
    token: int,
    at: float,
    until: datetime | None,
    *,
    heard: bool = True,
) -> None:
    ledger.lease_written(
        "g1",
        before,
        _state(token, until),
        process,
        T0 + timedelta(seconds=at),
        at,
        heard=heard,
    )


def _fenced(ledger: Ledger, old: int, new: int, at: float) -> None:
    text = (
        f"ALERT: ran here, then fenced (sim-consumer/g1: lease {old} was taken over "
        f"(now {new}); the handler outlived its lease): it may run again elsewhere"
    )
    fields = (("alert", "lease_outlived"), ("fifo_group", "g1"), ("dedup_key", "k1"))
    ledger.decisions.append(Decision(at, "lease_outlived", text, fields, RUN))


def _violations(ledger: Ledger, *, rollback: bool = True) -> list[str]:
    final: Any = SimpleNamespace(ledger=ledger, relax=SimpleNamespace(rollback=rollback))
    return [v.detail for v in _fenced_by_itself(final)]


def test_a_run_taken_over_by_another_process_first_is_no_false_alarm() -> None:
    """Seed 51255: lease 2 lost to a rollback, fenced by another process's repair (3); then
    this process's repair, knowing it was fenced, wrote 4: "taken over (now 4)" is true."""
    ledger = Ledger()
    lease = T0 + timedelta(seconds=180)
    _write(ledger, RUN, 1, 2, 120.0, lease)
    _write(ledger, OTHER, 1, 3, 132.0, None)  # after the rollback lost lease 2
    _write(ledger, RUN, 0, 4, 150.0, None)  # after a restart lost everything
    _fenced(ledger, 2, 4, 222.0)
    assert _violations(ledger) == []


def test_a_moved_lease_whose_save_timed_out_is_no_false_alarm() -> None:
    """Seed 44601: the repair moved the run's live lease 1 to 2 (same expiry), the save landed
    but timed out - the run could not know lease 2 was its own."""
    ledger = Ledger()
    lease = T0 + timedelta(seconds=100)
    _write(ledger, RUN, 0, 1, 40.0, lease)
    _write(ledger, RUN, 0, 2, 58.0, lease, heard=False)
    _fenced(ledger, 1, 2, 58.1)
    assert _violations(ledger) == []


def test_a_moved_lease_that_was_answered_is_a_false_alarm() -> None:
    """Mutation 24.3's shape: the move answered, then the run ignores it."""
    ledger = Ledger()
    lease = T0 + timedelta(seconds=100)
    _write(ledger, RUN, 0, 1, 40.0, lease)
    _write(ledger, RUN, 0, 2, 58.0, lease)
    _fenced(ledger, 1, 2, 58.1)
    assert len(_violations(ledger)) == 1


def test_a_new_lease_of_its_own_with_a_lost_reply_is_a_false_alarm() -> None:
    """A process that takes over its own live run (a new expiry, not the run's lease moved)
    is caught whether or not it heard the reply: it should not have written at all."""
    ledger = Ledger()
    _write(ledger, RUN, 0, 1, 40.0, T0 + timedelta(seconds=100))
    _write(ledger, RUN, 1, 2, 58.0, T0 + timedelta(seconds=118), heard=False)
    _fenced(ledger, 1, 2, 58.1)
    assert len(_violations(ledger)) == 1


def test_a_lost_reply_excuses_nothing_without_a_store_loss() -> None:
    ledger = Ledger()
    lease = T0 + timedelta(seconds=100)
    _write(ledger, RUN, 0, 1, 40.0, lease)
    _write(ledger, RUN, 0, 2, 58.0, lease, heard=False)
    _fenced(ledger, 1, 2, 58.1)
    assert len(_violations(ledger, rollback=False)) == 1


def test_its_own_takeover_with_no_other_writer_between_is_a_false_alarm() -> None:
    """Mutation 24.busy's shape: its own sweeper takes the group over while the run is live;
    another process's write AFTER that fence does not excuse it."""
    ledger = Ledger()
    _write(ledger, RUN, 0, 1, 40.0, T0 + timedelta(seconds=100))
    _write(ledger, RUN, 1, 2, 58.0, T0 + timedelta(seconds=118))
    _write(ledger, OTHER, 2, 3, 59.0, T0 + timedelta(seconds=119))
    _fenced(ledger, 1, 2, 60.0)
    assert len(_violations(ledger)) == 1
