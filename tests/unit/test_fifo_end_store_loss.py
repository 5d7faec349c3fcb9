"""A copy parked past a FIFO group's end, then a store that loses writes: the copy is never
lost silently - it is dead-lettered ``fifo_after_end`` once, or (no dead-letter topic) handed to
the operator whole in an ``after_end_dropped`` ALERT.

The case the review found: one process parks a copy numbered past the end (acked), the store
then loses that park (it restarted empty, or rolled back to an earlier record) and another
process runs the end on a record that does not list the copy. The group is complete, so a
complete record that no longer lists the copy used to read as "settled by whoever ended the
group" (seed 1997's excuse) - the copy was gone with no dead letter and no ALERT. A settled copy
now leaves its number among the record's skipped ones, so only a settle excuses the unlisting.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from datetime import timedelta

import pytest

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.core import fifo_rules as rules
from pubsub_toolkit.core.fifo_policy import REASON_AFTER_END, GateOutcome, GatePolicy
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.stores.fifo_state.base import GroupState
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.support.sinks import RecordingSink

CONSUMER = "consumer-a"
DLQ = "projects/p/topics/dlq"
RETENTION = timedelta(days=8)


def keyed(seq: int, key: str, *, end: bool = False) -> Message:
    attributes = {"fifo_group": "g", "fifo_seq": str(seq), "dedup_key": key, "color": "blue"}
    if end:
        attributes[attr.FIFO_END] = attr.FIFO_END_TRUE
    return Message(f"data of {key}".encode(), attributes, message_id=f"m{seq}-{key}")


def process(store: MemoryFifoStore, clock: ManualClock, sink: RecordingSink | None) -> FifoGate:
    """One consumer process: its own gate (and memory of the group) on the shared store."""
    log = DecisionLog(CONSUMER)
    return FifoGate(
        store,
        consumer=CONSUMER,
        handler=lambda _message: None,
        dead_letters=None if sink is None else DeadLetterer(sink, DLQ, log),
        policy=GatePolicy(completed_retention=RETENTION),
        clock=clock,
        log=log,
    )


def restart_empty(store: MemoryFifoStore, _before: GroupState) -> None:
    """Redis restarted without persistence: every record and every parked copy gone."""
    store._states.clear()
    store._parked.clear()


def roll_back(store: MemoryFifoStore, before: GroupState) -> None:
    """A failover to a replica that had not seen the park: the record as it was before it."""
    store._states[(CONSUMER, "g")] = before


def reasons(sink: RecordingSink) -> list[tuple[str, str]]:
    return [(m.attributes["fifo_seq"], m.attributes[attr.ERROR_REASON]) for m in sink.on(DLQ)]


def outcomes(caplog: pytest.LogCaptureFixture, outcome: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "decision", {}).get("outcome") == outcome]


Loss = Callable[[MemoryFifoStore, GroupState], None]


def end_on_a_record_that_lost_the_park(
    loss: Loss, sink: RecordingSink | None
) -> tuple[MemoryFifoStore, FifoGate, FifoGate, Message]:
    """The first process runs #1; the second parks #3 (past the end to come, acked); the store
    loses that park; the first runs #2, the end, on a record that does not list #3."""
    clock = ManualClock()
    store = MemoryFifoStore(clock=clock)
    first, second = process(store, clock, sink), process(store, clock, sink)
    assert first.deliver(keyed(1, "k1"), "g", 1).outcome is GateOutcome.PROCESSED
    before_park = store.load(CONSUMER, "g")
    stray = keyed(3, "k3")
    assert second.deliver(stray, "g", 3).outcome is GateOutcome.PARKED  # acked
    loss(store, before_park)
    assert first.deliver(keyed(2, "k2", end=True), "g", 2).outcome is GateOutcome.PROCESSED
    state = store.load(CONSUMER, "g")
    assert state.complete and state.parked == ()  # the end never saw #3
    return store, first, second, stray


@pytest.mark.parametrize("loss", [restart_empty, roll_back])
def test_a_copy_parked_past_the_end_and_lost_by_the_store_is_dead_lettered_once(
    loss: Loss, caplog: pytest.LogCaptureFixture
) -> None:
    sink = RecordingSink()
    store, first, second, _ = end_on_a_record_that_lost_the_park(loss, sink)
    alerts = len(outcomes(caplog, "store_rollback"))  # the first process's, after a restart
    # The process that parked #3 still has its copy: its next look at the group finds the loss.
    assert second.sweep("g").outcome is GateOutcome.IDLE
    assert reasons(sink) == [("3", REASON_AFTER_END)]
    assert len(outcomes(caplog, "store_rollback")) == alerts + 1  # the loss is said, once
    state = store.load(CONSUMER, "g")
    assert state.complete and state.end_seq == 2 and state.parked == ()
    assert store.parked_message(CONSUMER, "g", 3) is None
    # Nobody settles it again: every process reads the settled record as no loss.
    for gate in (first, second, first, second):
        assert gate.sweep("g").outcome is GateOutcome.IDLE
    assert first.deliver(keyed(4, "k4"), "g", 4).outcome is GateOutcome.DEAD_LETTERED
    assert reasons(sink) == [("3", REASON_AFTER_END), ("4", REASON_AFTER_END)]
    assert len(outcomes(caplog, "store_rollback")) == alerts + 1


@pytest.mark.parametrize("loss", [restart_empty, roll_back])
def test_without_a_dead_letter_topic_the_lost_copy_goes_to_the_operator_whole_once(
    loss: Loss, caplog: pytest.LogCaptureFixture
) -> None:
    store, first, second, stray = end_on_a_record_that_lost_the_park(loss, None)
    assert second.sweep("g").outcome is GateOutcome.IDLE
    for gate in (first, second, first):
        assert gate.sweep("g").outcome is GateOutcome.IDLE
    handed = outcomes(caplog, "after_end_dropped")
    assert len(handed) == 1 and "ALERT" in handed[0].getMessage()
    fields = handed[0].decision  # type: ignore[attr-defined]
    assert fields["dedup_key"] == "k3" and fields["attributes"] == dict(stray.attributes)
    assert base64.b64decode(fields["data_base64"]) == stray.data
    assert store.load(CONSUMER, "g").parked == ()
    assert store.parked_message(CONSUMER, "g", 3) is None


def test_a_complete_group_whose_parked_copy_is_lost_before_it_was_settled_settles_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One process: #3 parked, the end runs, the dead letter fails (the copy stays listed on
    the complete record), then the store restarts empty: the repair parks the copy again and
    the sweep settles it."""
    clock, sink = ManualClock(), RecordingSink()
    store = MemoryFifoStore(clock=clock)
    gate = process(store, clock, sink)
    assert gate.deliver(keyed(3, "k3"), "g", 3).outcome is GateOutcome.PARKED
    assert gate.deliver(keyed(1, "k1"), "g", 1).outcome is GateOutcome.PROCESSED
    sink.fail_next = 1  # the dead letter fails: the settle is left for the sweep
    with pytest.raises(Exception, match="injected"):
        gate.deliver(keyed(2, "k2", end=True), "g", 2)
    state = store.load(CONSUMER, "g")
    assert state.complete and state.parked == (3,)
    restart_empty(store, state)
    assert gate.sweep("g").outcome is GateOutcome.IDLE
    assert reasons(sink) == [("3", REASON_AFTER_END)]
    assert store.load(CONSUMER, "g").end_seq == 2
    assert store.load(CONSUMER, "g").parked == ()
    assert gate.sweep("g").outcome is GateOutcome.IDLE
    assert reasons(sink) == [("3", REASON_AFTER_END)]


def test_went_back_tells_a_settled_copy_from_one_the_store_lost() -> None:
    clock = ManualClock()
    seen = GroupState(last_processed=1, parked=(3,), keys=((1, "d1"), (3, "d3")))
    ended = rules.ended(
        GroupState(last_processed=2, keys=((1, "d1"), (2, "d2"))),
        now=clock.now(),
        retention=RETENTION,
    )
    # Ended without ever listing #3: the store lost the park.
    assert rules.went_back(seen, ended, now=clock.now())
    assert rules.lost_parked(seen, ended) == [3]
    # Ended with #3 listed, then settled: no loss, nothing to park again.
    settled = rules.without_after_end(ended.with_parked(3, "d3"), (3,))
    assert settled.parked == () and settled.key_of(3) is None
    assert not rules.went_back(seen, settled, now=clock.now())
    assert rules.lost_parked(seen, settled) == []


@pytest.mark.parametrize("with_dlq", [True, False])
def test_a_copy_parked_past_the_end_outlives_a_store_and_counter_restart_as_after_end(
    with_dlq: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Epochs: #3 (past the end, epoch 1) parked and left unsettled on the complete record (its
    dead letter failed); Redis restarts empty - the record, the copy and the counter. Another
    process starts the group's new sequence (epoch 2) on the empty record. The process that
    parked #3 finds the loss: the copy is past the end of the group it saw, so it is kept as
    what it is - ``fifo_after_end`` - not as a number given again (``fifo_sequence_reused``)."""
    clock, sink = ManualClock(), RecordingSink()
    store = MemoryFifoStore(clock=clock)
    first = process(store, clock, sink if with_dlq else None)
    second = process(store, clock, sink if with_dlq else None)

    def numbered(message: Message, epoch: int) -> Message:
        return Message(message.data, {**message.attributes, attr.FIFO_EPOCH: str(epoch)}, "m")

    old = 1_000_000
    assert first.deliver(numbered(keyed(3, "k3"), old), "g", 3).outcome is GateOutcome.PARKED
    assert first.deliver(numbered(keyed(1, "k1"), old), "g", 1).outcome is GateOutcome.PROCESSED
    if with_dlq:
        sink.fail_next = 1  # the dead letter fails: #3 stays listed on the complete record
        with pytest.raises(Exception, match="injected"):
            first.deliver(numbered(keyed(2, "k2", end=True), old), "g", 2)
    else:  # the end's state written, then the process died before it settled #3
        state = store.load(CONSUMER, "g")
        done = rules.ended(
            rules.advanced(
                state, 2, skipped=(), digest="d2", now=clock.now(), lease=timedelta(seconds=60)
            ),
            now=clock.now(),
            retention=RETENTION,
        )
        assert first.sweep("g").outcome is GateOutcome.IDLE  # it saw #3 parked...
        assert store.save(CONSUMER, "g", done, state)
        first._seen.witnessed(store.load(CONSUMER, "g"), "g")  # ...and wrote the end itself
    assert store.load(CONSUMER, "g").complete and store.load(CONSUMER, "g").parked == (3,)
    restart_empty(store, store.load(CONSUMER, "g"))
    new = numbered(keyed(1, "n1"), old + 1)
    assert second.deliver(new, "g", 1).outcome is GateOutcome.PROCESSED
    for gate in (first, second, first):
        gate.sweep("g")
    if with_dlq:
        assert reasons(sink) == [("3", REASON_AFTER_END)]
    else:
        handed = outcomes(caplog, "after_end_dropped")
        assert len(handed) == 1 and handed[0].decision["dedup_key"] == "k3"  # type: ignore[attr-defined]
    assert outcomes(caplog, "sequence_reused") == []
