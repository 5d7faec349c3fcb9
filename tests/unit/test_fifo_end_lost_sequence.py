"""Copies parked in a FIFO sequence the store lost altogether (Redis restarted empty, counter
and all, and a new sequence - a new epoch - began on the empty record): each is kept once, for
a reason that does not lie.

The case the review found (F2): one process parks #3 past the end to come and never reads the
group again; another runs the end and settles #3 - dead-lettered ``fifo_after_end``. Then the
store restarts empty and a new sequence begins. The parking process still holds its copy, and
its memory of the group is from before the end: it used to take the copy for a number given
again - a second dead letter, ``fifo_sequence_reused``, under a misleading ALERT. It cannot know
whether the copy ran, lay past an end or was dead-lettered elsewhere; what it knows is that the
copy's sequence started again: ``fifo_sequence_restarted``. And the gate's dead letters are
once per copy whatever the reason (its ``rejections``, which the consumer's processor gives it),
so the settled copy is not dead-lettered twice.

And (L1) a repair whose save is refused (a compare-and-set conflict) runs again: it keeps each
copy once all the same - with no dead-letter topic, the ALERT that carries a copy whole is not
repeated once per refused round.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.core import fifo_rules as rules
from pubsub_toolkit.core.fifo_policy import REASON_AFTER_END, REASON_SEQUENCE_RESTARTED, GateOutcome
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from pubsub_toolkit.stores.fifo_state.base import GroupState
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.support.sinks import RecordingSink
from tests.unit.test_fifo_end_store_loss import (
    CONSUMER,
    RETENTION,
    keyed,
    outcomes,
    process,
    reasons,
    restart_empty,
    roll_back,
)

OLD = 1_000_000  # the lost sequence's epoch; the new one is OLD + 1


def numbered(message: Message, epoch: int = OLD) -> Message:
    return Message(message.data, {**message.attributes, attr.FIFO_EPOCH: str(epoch)}, "m")


class ConflictingStore(MemoryFifoStore):
    """A memory store where the next ``conflicts`` saves meet another writer's write first (the
    record's version moves under them, its content the same): each is refused."""

    conflicts = 0

    def save(
        self, consumer: str, group: str, state: GroupState, expected: GroupState
    ) -> GroupState | None:
        if self.conflicts:
            self.conflicts -= 1
            current = self.load(consumer, group)
            assert super().save(consumer, group, current, current) is not None
        return super().save(consumer, group, state, expected)


def with_rejections(clock: ManualClock, *gates: FifoGate) -> None:
    """The dead letters' once-per-copy record, shared by the processes (as the consumer's
    processor wires it: a dedup store the FIFO store's restart did not empty)."""
    rejections = IdempotentProcessor(
        MemoryDedupStore(clock=clock),
        namespace=f"{CONSUMER}-rejected",
        lease=timedelta(seconds=30),
        ttl=RETENTION,
        clock=clock,
    )
    for gate in gates:
        gate.rejections = rejections


def test_settled_past_end_copy_is_not_dead_lettered_again_after_restart(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, sink = ManualClock(), RecordingSink()
    store = MemoryFifoStore(clock=clock)
    first, second, third = (process(store, clock, sink) for _ in range(3))
    with_rejections(clock, first, second, third)
    assert first.deliver(numbered(keyed(1, "k1")), "g", 1).outcome is GateOutcome.PROCESSED
    assert second.deliver(numbered(keyed(3, "k3")), "g", 3).outcome is GateOutcome.PARKED
    first.deliver(numbered(keyed(2, "k2", end=True)), "g", 2)  # the end settles #3
    assert store.load(CONSUMER, "g").complete
    assert reasons(sink) == [("3", REASON_AFTER_END)]
    restart_empty(store, store.load(CONSUMER, "g"))
    new = numbered(keyed(1, "n1"), OLD + 1)
    assert third.deliver(new, "g", 1).outcome is GateOutcome.PROCESSED
    second.sweep("g")  # the parker: its memory is from before the end
    assert reasons(sink) == [("3", REASON_AFTER_END)]
    assert outcomes(caplog, "sequence_reused") == []
    [alert] = outcomes(caplog, "store_rollback")
    assert REASON_SEQUENCE_RESTARTED in alert.getMessage()
    assert "fifo_sequence_reused" not in alert.getMessage()
    for gate in (second, first, second):
        gate.sweep("g")
    assert reasons(sink) == [("3", REASON_AFTER_END)]


@pytest.mark.parametrize("settled", [True, False])
def test_the_parkers_letter_says_its_sequence_restarted_not_a_reused_number(
    settled: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """No shared once-per-copy record (the gate on its own): the parker cannot know what became
    of its copy, so its letter says only what it knows. ``settled``: the end dead-lettered the
    copy first (two letters, each true); else the store lost the park before the end ran, and
    the parker's letter is the only one."""
    clock, sink = ManualClock(), RecordingSink()
    store = MemoryFifoStore(clock=clock)
    first, second, third = (process(store, clock, sink) for _ in range(3))
    assert first.deliver(numbered(keyed(1, "k1")), "g", 1).outcome is GateOutcome.PROCESSED
    before_park = store.load(CONSUMER, "g")
    assert second.deliver(numbered(keyed(3, "k3")), "g", 3).outcome is GateOutcome.PARKED
    if not settled:
        roll_back(store, before_park)
    first.deliver(numbered(keyed(2, "k2", end=True)), "g", 2)
    restart_empty(store, store.load(CONSUMER, "g"))
    assert third.deliver(numbered(keyed(1, "n1"), OLD + 1), "g", 1).outcome is (
        GateOutcome.PROCESSED
    )
    for gate in (second, second, first):
        gate.sweep("g")
    theirs = [("3", REASON_AFTER_END)] if settled else []
    assert reasons(sink) == [*theirs, ("3", REASON_SEQUENCE_RESTARTED)]
    assert outcomes(caplog, "sequence_reused") == []
    letter = sink.on("projects/p/topics/dlq")[-1]
    assert "epoch 1000000" in letter.attributes[attr.ERROR_DETAIL]
    assert third.deliver(numbered(keyed(2, "n2"), OLD + 1), "g", 2).outcome is (
        GateOutcome.PROCESSED
    )


def test_without_a_dead_letter_topic_the_parker_hands_its_copy_over_whole_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock()
    store = ConflictingStore(clock=clock)
    first, second, third = (process(store, clock, None) for _ in range(3))
    assert first.deliver(numbered(keyed(1, "k1")), "g", 1).outcome is GateOutcome.PROCESSED
    stray = numbered(keyed(3, "k3"))
    assert second.deliver(stray, "g", 3).outcome is GateOutcome.PARKED
    restart_empty(store, store.load(CONSUMER, "g"))
    assert third.deliver(numbered(keyed(1, "n1"), OLD + 1), "g", 1).outcome is (
        GateOutcome.PROCESSED
    )
    store.conflicts = 3  # the repair's save is refused three times: it runs four times
    for gate in (second, second, first):
        gate.sweep("g")
    handed = outcomes(caplog, "restarted_unkept")
    assert len(handed) == 1 and "ALERT" in handed[0].getMessage()
    assert handed[0].decision["attributes"] == dict(stray.attributes)  # type: ignore[attr-defined]
    assert outcomes(caplog, "reissued_unkept") == []


def test_a_refused_repair_save_does_not_hand_a_past_end_copy_over_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """L1: #3 parked past the end and left listed on the complete record (the end was written,
    then its process died before it settled #3); the store and counter restart empty and a new
    sequence begins; no dead-letter topic. The process that saw the end hands the copy over
    whole - once, although the repair's save is refused (and the repair runs again) three
    times."""
    clock = ManualClock()
    store = ConflictingStore(clock=clock)
    first, second = process(store, clock, None), process(store, clock, None)
    copy = numbered(keyed(3, "k3"))
    assert first.deliver(copy, "g", 3).outcome is GateOutcome.PARKED
    assert first.deliver(numbered(keyed(1, "k1")), "g", 1).outcome is GateOutcome.PROCESSED
    state = store.load(CONSUMER, "g")
    done = rules.ended(
        rules.advanced(
            state, 2, skipped=(), digest="d2", now=clock.now(), lease=timedelta(seconds=60)
        ),
        now=clock.now(),
        retention=RETENTION,
    )
    assert store.save(CONSUMER, "g", done, state)
    first._seen.witnessed(store.load(CONSUMER, "g"), "g")  # it wrote the end itself
    restart_empty(store, store.load(CONSUMER, "g"))
    assert second.deliver(numbered(keyed(1, "n1"), OLD + 1), "g", 1).outcome is (
        GateOutcome.PROCESSED
    )
    store.conflicts = 3
    for gate in (first, first, second):
        gate.sweep("g")
    handed = outcomes(caplog, "after_end_dropped")
    assert len(handed) == 1
    assert handed[0].decision["attributes"] == dict(copy.attributes)  # type: ignore[attr-defined]
    assert len(outcomes(caplog, "store_rollback")) == 4  # the repair did run four times


def test_a_refused_repair_save_does_not_hand_a_reissued_copy_over_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The same for a copy another process parked at a number the store gave again (no
    epochs): its ``reissued_unkept`` ALERT once, however often the repair's save is refused."""
    clock = ManualClock()
    store = ConflictingStore(clock=clock)
    first, second = process(store, clock, None), process(store, clock, None)
    for seq in (1, 2):
        assert first.deliver(keyed(seq, f"k{seq}"), "g", seq).outcome is GateOutcome.PROCESSED
    store._states.clear()  # the data loss
    assert second.deliver(keyed(2, "new"), "g", 2).outcome is GateOutcome.PARKED
    store.conflicts = 3
    first.sweep("g")
    first.sweep("g")
    assert len(outcomes(caplog, "reissued_unkept")) == 1
    assert len(outcomes(caplog, "store_rollback")) == 4
    assert store.parked_message(CONSUMER, "g", 2) is None
    assert store.load(CONSUMER, "g").parked == ()
