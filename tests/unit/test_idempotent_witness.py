"""A store that loses a done record (Redis restart, failover) cannot make an effect run twice
for the process that recorded it: its witness remembers (pubsub_toolkit.witness)."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor, Outcome
from pubsub_toolkit.errors import StoreUnavailableError
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore


def one_process(store: MemoryDedupStore, clock: ManualClock) -> IdempotentProcessor:
    """A process's processor on ``store``: a 30 s lease, an 8-day TTL."""
    return IdempotentProcessor(
        store, namespace="c", lease=timedelta(seconds=30), ttl=timedelta(days=8), clock=clock
    )


def test_a_lost_done_record_is_recorded_again_not_rerun(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock()
    store = MemoryDedupStore(clock)
    processor = one_process(store, clock)
    runs: list[str] = []
    effect = lambda: runs.append("x") or "result"  # noqa: E731
    assert processor.process("k", "fp", effect).outcome is Outcome.PROCESSED
    store._records.clear()  # the data loss
    again = processor.process("k", "fp", effect)
    assert (again.outcome, again.result, runs) == (Outcome.DUPLICATE, "result", ["x"])
    assert any("ALERT" in r.getMessage() for r in caplog.records)
    assert store.get("c", "k") is not None  # recorded again for everyone else

    other_process = one_process(store, clock)
    store._records.clear()
    # A process that never saw it cannot know: the README's weaker guarantee.
    assert other_process.process("k", "fp", effect).outcome is Outcome.PROCESSED
    clock.advance(timedelta(days=9))  # past the TTL the witness stands down too
    store._records.clear()
    assert processor.process("k", "fp", effect).outcome is Outcome.PROCESSED


def test_a_done_record_that_was_never_written_is_written_late_without_a_loss_alert(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The effect ran, every ``complete`` failed (an outage: ALERT ``complete_failed`` then),
    and the redelivery takes the expired lease over: the store lost nothing, so the late write
    is a WARNING, not a ``store_rollback`` ALERT (found by the simulation's no-false-alarm
    check)."""

    class DownForCompletes(MemoryDedupStore):
        down = True

        def complete(self, *args: Any, **kwargs: Any) -> Any:
            if self.down:
                raise StoreUnavailableError("the store is unreachable")
            return super().complete(*args, **kwargs)

    clock = ManualClock()
    store = DownForCompletes(clock)
    processor = one_process(store, clock)
    runs: list[str] = []
    effect = lambda: runs.append("x") or "result"  # noqa: E731
    with pytest.raises(StoreUnavailableError):
        processor.process("k", "fp", effect)
    store.down = False
    clock.advance(timedelta(seconds=31))  # the lease ends; the redelivery takes it over
    again = processor.process("k", "fp", effect)
    assert (again.outcome, again.result, runs) == (Outcome.DUPLICATE, "result", ["x"])
    outcomes = [getattr(r, "decision", {}).get("outcome") for r in caplog.records]
    assert "complete_failed" in outcomes and "recorded_late" in outcomes
    assert "store_rollback" not in outcomes
    record = store.get("c", "k")
    assert record is not None and record.result == "result"  # written late, for everyone
    # Acknowledged now: if the store loses it after all, that is a loss, and said as one.
    store._records.clear()
    clock.advance(timedelta(seconds=31))
    assert processor.process("k", "fp", effect).outcome is Outcome.DUPLICATE
    outcomes = [getattr(r, "decision", {}).get("outcome") for r in caplog.records]
    assert outcomes.count("store_rollback") == 1 and runs == ["x"]


def test_a_retry_after_this_process_released_the_key_is_no_lost_worker_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Taking over a claim this process released after its effect failed is the ordinary
    retry (INFO); taking over one whose holder vanished is a WARNING."""
    clock = ManualClock()
    store = MemoryDedupStore(clock)
    processor = one_process(store, clock)
    caplog.set_level(logging.INFO)

    def fails() -> str:
        raise RuntimeError("payment service unavailable")

    with pytest.raises(RuntimeError):
        processor.process("k", "fp", fails)
    assert processor.process("k", "fp", lambda: "ok").outcome is Outcome.PROCESSED
    # Another worker claimed "k2" and vanished: its lease runs out, this process takes over.
    store.claim("c", "k2", "fp", lease=timedelta(seconds=30), ttl=timedelta(days=8))
    clock.advance(timedelta(seconds=31))
    assert processor.process("k2", "fp", lambda: "ok").outcome is Outcome.PROCESSED
    takeovers = {
        r.decision["dedup_key"]: (r.levelno, r.getMessage())  # type: ignore[attr-defined]
        for r in caplog.records
        if getattr(r, "decision", {}).get("outcome") == "taken_over"
    }
    assert takeovers["k"][0] == logging.INFO and "released here" in takeovers["k"][1]
    assert takeovers["k2"][0] == logging.WARNING and "claim ended" in takeovers["k2"][1]
