"""The FIFO gate's core driven by hand: no store, no driver - the test answers each effect.

Each scene is a table: the effects the core must yield, in order, and the answer the test
gives each (a value sent back, or an exception thrown in at the yield, as a driver would). So
the gate's main decisions are pinned at the granularity a driver sees them: a message in order
runs the handler and then advances (one write to lease, one to advance); a duplicate never
reaches the handler; an early number is parked (its copy, then the state listing it); a
failing handler leaves a parked copy and the head's next attempt in the state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.core import fifo_effects as fx
from pubsub_toolkit.core.fifo_gate import FifoCore
from pubsub_toolkit.core.fifo_parts import HandlerFailedError
from pubsub_toolkit.core.fifo_policy import GateOutcome, GatePolicy, GateResult
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.fifo_state.base import GroupState, key_digest

START = datetime(2026, 1, 1, tzinfo=UTC)
BACKOFF = timedelta(seconds=5)


@dataclass(frozen=True)
class Step:
    """One effect the core must yield (its type, and what must hold of it) and the answer."""

    kind: type
    answer: Any = None  # a value to send; an exception to throw in; or a function of the effect
    check: Callable[[Any], bool] = lambda effect: True


def stored(version: int) -> Callable[[fx.Save], GroupState]:
    """A compare-and-set that lands: the state written, at a new version."""
    return lambda effect: replace(effect.state, version=version)


def play(op: fx.Op[Any], steps: list[Step]) -> tuple[Any, list[fx.Effect]]:
    """Drive ``op`` through ``steps``; (what it returned, the effects it yielded)."""
    trace: list[fx.Effect] = []
    effect = next(op)
    for number, step in enumerate(steps):
        assert type(effect) is step.kind, f"effect {number}: {effect!r}, not a {step.kind}"
        assert step.check(effect), f"effect {number}: {effect!r}"
        trace.append(effect)
        answer = step.answer(effect) if callable(step.answer) else step.answer
        try:
            effect = op.throw(answer) if isinstance(answer, BaseException) else op.send(answer)
        except StopIteration as done:
            assert number == len(steps) - 1, f"returned after effect {number} of {len(steps)}"
            return done.value, trace
    raise AssertionError(f"yielded more than the table: {effect!r}")


def message(seq: int, key: str | None = None) -> Message:
    return Message(b"x", {"dedup_key": key or f"k{seq}", "fifo_seq": str(seq)}, f"m{seq}")


@pytest.fixture
def core() -> FifoCore:
    decisions: list[str] = []
    return FifoCore(
        consumer="c",
        decide=lambda outcome, *args, **fields: decisions.append(outcome),
        policy=GatePolicy(retry_backoff=BACKOFF),
        clock=ManualClock(START),
    )


def test_in_order_runs_the_handler_then_advances(core: FifoCore) -> None:
    one = message(1)
    result, _trace = play(
        core.deliver(one, "g", 1),
        [
            Step(fx.Load, GroupState(), lambda e: (e.consumer, e.group) == ("c", "g")),
            Step(fx.Save, stored(1), lambda e: e.state.lease_token == 1 and e.state.lease_until),
            Step(fx.SpanStart, None, lambda e: e.message is one),
            Step(fx.Handle, None, lambda e: e.taken is one),
            Step(
                fx.Save,
                stored(2),
                lambda e: (
                    e.state.last_processed == 1
                    and e.state.lease_until is None
                    and e.expected.version == 1
                ),  # against the lease it wrote: no read between
            ),
            Step(fx.SpanEnd, None, lambda e: e.error is None),
        ],
    )
    assert result == GateResult(GateOutcome.PROCESSED, "g", 1)


def test_a_duplicate_never_reaches_the_handler(core: FifoCore) -> None:
    result, trace = play(
        core.deliver(message(2), "g", 2),
        [Step(fx.Load, GroupState(last_processed=3, version=7))],
    )
    assert result.outcome is GateOutcome.DUPLICATE
    assert not any(isinstance(effect, fx.Handle) for effect in trace)


def test_an_early_number_is_parked_then_listed(core: FifoCore) -> None:
    three = message(3)
    result, _trace = play(
        core.deliver(three, "g", 3),
        [
            Step(fx.Load, GroupState(last_processed=1, version=4)),
            Step(fx.Park, None, lambda e: (e.seq, e.message) == (3, three)),
            Step(fx.ParkedMessage, three, lambda e: e.seq == 3),  # the copy stored is ours
            Step(
                fx.Save,
                stored(5),
                lambda e: (
                    e.state.parked == (3,)
                    and e.state.key_of(3) == key_digest("k3")
                    and e.state.gap_since == START
                ),  # #2 is missing from now
            ),
        ],
    )
    assert result == GateResult(GateOutcome.PARKED, "g", 3)


def test_a_failing_handler_leaves_a_parked_copy_and_the_next_attempt(core: FifoCore) -> None:
    one = message(1)
    leased: list[GroupState] = []

    def lease(effect: fx.Save) -> GroupState:
        leased.append(replace(effect.state, version=1))
        return leased[0]

    with pytest.raises(HandlerFailedError):  # the delivery is nacked: its copy is parked
        play(
            core.deliver(one, "g", 1),
            [
                Step(fx.Load, GroupState()),
                Step(fx.Save, lease),
                Step(fx.SpanStart),
                Step(fx.Handle, ValueError("boom")),  # the handler raises
                Step(fx.Load, lambda e: leased[0]),  # the failure is counted on the record
                Step(fx.Save, stored(2), lambda e: e.state.attempts == 1),
                Step(fx.Park, None, lambda e: (e.seq, e.message) == (1, one)),
                Step(fx.ParkedMessage, one),
                Step(fx.Load, lambda e: replace(leased[0], attempts=1, version=2)),
                Step(
                    fx.Save,
                    stored(3),
                    lambda e: (
                        e.state.parked == (1,)
                        and e.state.lease_until is None
                        and e.state.next_attempt_at == START + BACKOFF
                    ),
                ),
                Step(fx.SpanEnd, None, lambda e: isinstance(e.error, HandlerFailedError)),
            ],
        )


def test_a_store_error_is_thrown_in_where_the_core_decides_what_it_means(core: FifoCore) -> None:
    """The advance after a successful run hits a store hiccup: thrown in at the yield, the
    core waits (a Sleep effect) and reads whether its first write landed, as it did here."""
    from pubsub_toolkit.errors import StoreUnavailableError

    one = message(1)
    written: list[GroupState] = []

    def advance_lands_then_reply_is_lost(effect: fx.Save) -> BaseException:
        written.append(replace(effect.state, version=2))
        return StoreUnavailableError("timed out after applying")

    result, trace = play(
        core.deliver(one, "g", 1),
        [
            Step(fx.Load, GroupState()),
            Step(fx.Save, stored(1)),
            Step(fx.SpanStart),
            Step(fx.Handle),
            Step(fx.Save, advance_lands_then_reply_is_lost),
            Step(fx.Sleep, None, lambda e: e.seconds == 0.1),
            Step(fx.Load, lambda e: written[0]),  # it landed: the run is recorded, not redone
            Step(fx.SpanEnd, None, lambda e: e.error is None),
        ],
    )
    assert result.outcome is GateOutcome.PROCESSED
    assert sum(isinstance(effect, fx.Handle) for effect in trace) == 1
