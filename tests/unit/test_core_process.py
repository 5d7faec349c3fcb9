"""The message processor's protocol (:mod:`pubsub_toolkit.core.process`) driven by hand: each
effect it yields is answered here - no gate, store, handler or driver involved (issue 26)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.core import process
from pubsub_toolkit.core.fifo_policy import GateOutcome, GateResult
from pubsub_toolkit.core.idempotent_run import Outcome, ProcessResult
from pubsub_toolkit.errors import PermanentError, RetryLater
from pubsub_toolkit.message import Message

NOW = datetime(2030, 1, 1, tzinfo=UTC)


class Decisions:
    """Records each decision logged, as (outcome, level)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, int]] = []

    def decision(
        self, outcome: str, message: str, *, dedup_key: str | None, level: int = 20, **f: Any
    ) -> None:
        self.lines.append((outcome, level))


def scope(log: Decisions, *, scheduler: bool = True, dead_letters: bool = True) -> process.Scope:
    return process.Scope(
        consumer="orders",
        max_attempts=3,
        dead_letters=dead_letters,
        scheduler=scheduler,
        batch=False,
        log=log,
        clock=ManualClock(NOW),
    )


def plain(**extra: str) -> Message:
    return Message(b"order", {attr.DEDUP_KEY: "k1", **extra}, message_id="m1")


def finish(step: process.Step[Any], reply: object) -> object:
    with pytest.raises(StopIteration) as stop:
        step.send(reply)
    return stop.value.value


def test_a_plain_message_runs_once_and_its_outcome_is_the_dedup_result() -> None:
    step = process.process(scope(Decisions()), plain())
    run_once = next(step)
    assert isinstance(run_once, process.RunOnce) and run_once.key == "k1"
    # The effect: the handler, its return value stored as text.
    assert next(run_once.run) == process.CallHandler(plain())
    assert finish(run_once.run, 42) == "42"
    assert finish(step, ProcessResult(Outcome.PROCESSED, "42")) == "processed"


def test_a_grouped_message_goes_to_the_gate() -> None:
    message = plain(**{attr.FIFO_GROUP: "g", attr.FIFO_SEQ: "7"})
    step = process.process(scope(Decisions()), message)
    assert next(step) == process.Deliver(message, "g", 7)
    assert finish(step, GateResult(GateOutcome.PARKED, "g", 1)) == "parked"


def test_a_retry_later_below_the_limit_is_rescheduled_as_the_next_attempt() -> None:
    log = Decisions()
    step = process.process(scope(log), plain())
    run_once = next(step)
    next(run_once.run)
    later = RetryLater(timedelta(minutes=5), "stock service down")
    with pytest.raises(RetryLater):  # the effect lets it out: the claim is released
        run_once.run.throw(later)
    schedule = step.throw(later)
    assert schedule == process.ScheduleRetry(plain(), "k1", "orders", 2, NOW + timedelta(minutes=5))
    assert finish(step, "task-1") == process.RETRY_SCHEDULED
    assert log.lines == [(process.RETRY_SCHEDULED, logging.INFO)]


def test_a_retry_later_at_the_limit_is_dead_lettered_and_recorded_done() -> None:
    last = plain(**{attr.RETRY_ATTEMPT: "3", attr.RETRY_CONSUMER: "orders"})
    step = process.process(scope(Decisions()), last)
    run_once = next(step)
    next(run_once.run)
    dead_letter = run_once.run.throw(RetryLater(timedelta(minutes=5)))
    assert isinstance(dead_letter, process.DeadLetter)
    assert dead_letter.reason == process.REASON_RETRY_LIMIT
    # Done, with the mark of a dead letter: no copy counts again, a `dlq replay` runs it.
    assert finish(run_once.run, "dl-1") == process.DEAD_LETTERED_RESULT
    assert finish(step, ProcessResult(Outcome.PROCESSED, None)) == process.DEAD_LETTERED


def test_a_retry_later_without_a_delay_path_is_nacked_with_a_warning() -> None:
    log = Decisions()
    step = process.retry_later(scope(log, scheduler=False), plain(), RetryLater(timedelta(1)))
    with pytest.raises(RetryLater):
        next(step)
    assert log.lines == [("retry_later_unscheduled", logging.WARNING)]


def test_a_copy_the_delay_path_cannot_hold_is_dead_lettered() -> None:
    step = process.retry_later(scope(Decisions()), plain(), RetryLater(timedelta(days=60)))
    assert isinstance(next(step), process.ScheduleRetry)
    dead_letter = step.throw(PermanentError("delay_too_long", "60 days"))
    assert dead_letter == process.DeadLetter(plain(), "delay_too_long", "60 days", "k1")
    assert finish(step, "dl-1") == process.DEAD_LETTERED


def test_a_reused_key_is_dead_lettered_once_through_the_rejection_records() -> None:
    step = process.process(scope(Decisions()), plain())
    run_once = next(step)
    reject_once = step.send(ProcessResult(Outcome.MISMATCH))
    assert isinstance(reject_once, process.RejectOnce)
    assert reject_once.once == f"mismatch:k1:{run_once.fingerprint}"
    dead_letter = next(reject_once.run)
    assert dead_letter.reason == attr.REASON_FINGERPRINT_MISMATCH  # type: ignore[union-attr]
    assert finish(step, ProcessResult(Outcome.PROCESSED)) == process.DEAD_LETTERED


def test_without_a_dead_letter_topic_a_rejection_raises() -> None:
    error = PermanentError("invalid_payload", "no")
    with pytest.raises(PermanentError):
        next(process.reject(scope(Decisions(), dead_letters=False), plain(), error))
