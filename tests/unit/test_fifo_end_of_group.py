"""The end of a FIFO group (``fifo_end``): the pure rules, then the gate on the memory store.

Once the number the producer marked as the group's last is behind the gate, the group is
complete (its state keeps the end and an expiry), a later number is dead-lettered
``fifo_after_end`` - unless the dedup question says it is a copy of a message that already ran -
and the record is a tombstone that expires after the retention.
"""

from __future__ import annotations

import base64
from dataclasses import replace
from datetime import timedelta

import pytest

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.consumer.processor import MessageProcessor
from pubsub_toolkit.core import fifo_policy
from pubsub_toolkit.core import fifo_rules as rules
from pubsub_toolkit.core.fifo_policy import REASON_AFTER_END, GateOutcome, GatePolicy, PoisonPolicy
from pubsub_toolkit.core.fifo_rules import EndVerdict
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from pubsub_toolkit.stores.fifo_state.base import GroupState, key_digest
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.support.sinks import RecordingSink

DLQ = "projects/p/topics/dlq"
CONSUMER = "consumer-a"
RETENTION = timedelta(days=8)


def keyed(seq: int, key: str | None = None, *, end: bool = False, **extra: str) -> Message:
    attributes = {"fifo_group": "g", "fifo_seq": str(seq), "dedup_key": key or f"k{seq}"}
    if end:
        attributes[attr.FIFO_END] = attr.FIFO_END_TRUE
    return Message(f"g:{seq}".encode(), {**attributes, **extra}, message_id=f"m{seq}")


def filler(seq: int) -> Message:
    return Message(b"", dict(attr.filler_message("g", seq, f"k{seq}", "cancelled").attributes))


class Recorder:
    def __init__(self) -> None:
        self.seen: list[int] = []
        self.failing: set[int] = set()

    def __call__(self, message: Message) -> None:
        seq = int(message.attributes["fifo_seq"])
        if seq in self.failing:
            raise RuntimeError(f"cannot handle #{seq}")
        self.seen.append(seq)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def store(clock: ManualClock) -> MemoryFifoStore:
    return MemoryFifoStore(clock=clock)


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


@pytest.fixture
def handler() -> Recorder:
    return Recorder()


def make_gate(
    store: MemoryFifoStore,
    handler: Recorder,
    clock: ManualClock,
    sink: RecordingSink,
    **policy: object,
) -> FifoGate:
    log = DecisionLog(CONSUMER)
    return FifoGate(
        store,
        consumer=CONSUMER,
        handler=handler,
        dead_letters=DeadLetterer(sink, DLQ, log),
        policy=GatePolicy(completed_retention=RETENTION, **policy),  # type: ignore[arg-type]
        clock=clock,
        log=log,
    )


@pytest.fixture
def gate(
    store: MemoryFifoStore, handler: Recorder, clock: ManualClock, sink: RecordingSink
) -> FifoGate:
    return make_gate(store, handler, clock, sink)


def deliver(gate: FifoGate, message: Message) -> GateOutcome:
    return gate.deliver(message, "g", int(message.attributes["fifo_seq"])).outcome


def dead_letters(sink: RecordingSink) -> list[tuple[str, str]]:
    return [(m.attributes["fifo_seq"], m.attributes["error_reason"]) for m in sink.on(DLQ)]


# --- the pure rules ---------------------------------------------------------------------------


def complete_at(end: int, *, keys: dict[int, str] | None = None) -> GroupState:
    clock = ManualClock()
    state = GroupState(last_processed=end, keys=tuple(sorted((keys or {}).items())))
    return rules.ended(state, now=clock.now(), retention=RETENTION)


def test_ended_keeps_the_end_frees_the_lease_and_dates_the_tombstone() -> None:
    clock = ManualClock()
    leased = GroupState(last_processed=2, lease_token=3, lease_until=clock.now() + RETENTION)
    done = rules.ended(leased, now=clock.now(), retention=RETENTION)
    assert done.complete and done.end_seq == 2 and done.last_processed == 2
    assert done.expire_at == clock.now() + RETENTION
    assert done.lease_until is None and done.gap_since is None
    assert not GroupState(last_processed=2).complete


def test_advancing_past_the_end_completes_instead_of_running_a_parked_successor() -> None:
    clock = ManualClock()
    state = GroupState(last_processed=1, parked=(3,), keys=((3, "d3"),))
    state = rules.with_arrival_parked(state, 2, "d2", now=clock.now())  # head parked too
    new = rules.advanced(
        state,
        2,
        skipped=(),
        digest="d2",
        now=clock.now(),
        lease=timedelta(seconds=60),
        end=True,
        retention=RETENTION,
    )
    assert new.end_seq == 2 and new.lease_until is None  # no lease renewed for #3
    assert new.parked == (3,)  # still listed until the gate has dead-lettered it
    open_ = rules.advanced(
        state, 2, skipped=(), digest="d2", now=clock.now(), lease=timedelta(seconds=60)
    )
    assert not open_.complete and open_.lease_until is not None


def test_after_end_is_open_for_an_open_group_and_for_numbers_up_to_the_end() -> None:
    assert rules.after_end(GroupState(last_processed=2), 3, keyed(3)) is EndVerdict.OPEN
    done = complete_at(2)
    assert rules.after_end(done, 2, keyed(2)) is EndVerdict.OPEN  # a duplicate, as before
    assert rules.after_end(done, 1, filler(1)) is EndVerdict.OPEN


def test_after_end_refuses_a_new_message_numbered_past_the_end() -> None:
    assert rules.after_end(complete_at(2), 3, keyed(3)) is EndVerdict.REFUSED
    assert rules.after_end(complete_at(2), 10**6, keyed(10**6)) is EndVerdict.REFUSED


def test_after_end_asks_the_dedup_question_first_a_renumbered_copy_is_a_duplicate() -> None:
    done = complete_at(2, keys={1: key_digest("k1"), 2: key_digest("k2")})
    assert rules.after_end(done, 3, keyed(3, "k2", end=True)) is EndVerdict.DUPLICATE
    assert rules.after_end(done, 4, keyed(4, "k1")) is EndVerdict.DUPLICATE
    assert rules.after_end(done, 3, keyed(3, "k3")) is EndVerdict.REFUSED


def test_after_end_a_filler_carries_nothing_to_keep() -> None:
    assert rules.after_end(complete_at(2), 3, filler(3)) is EndVerdict.FILLER


def test_without_after_end_unlists_the_numbers_and_their_keys() -> None:
    done = replace(complete_at(2), parked=(3, 5), keys=((2, "d2"), (3, "d3"), (5, "d5")))
    settled = rules.without_after_end(done, (3,))
    assert settled.parked == (5,) and settled.keys == ((2, "d2"), (5, "d5"))


def test_an_expired_tombstone_is_no_store_rollback_but_a_live_one_is() -> None:
    clock = ManualClock()
    done = complete_at(2)
    assert rules.went_back(done, GroupState(), now=clock.now())
    assert not rules.went_back(done, GroupState(), now=clock.now() + RETENTION)


def test_a_repair_keeps_a_completion_the_store_lost() -> None:
    clock = ManualClock()
    seen = complete_at(2)
    older = GroupState(last_processed=1)
    repaired = rules.repaired(seen, older, restored=[], now=clock.now())
    assert repaired.end_seq == 2 and repaired.expire_at == seen.expire_at


def test_an_operator_skip_of_the_end_completes_the_group() -> None:
    clock = ManualClock()
    state = GroupState(last_processed=1, blocked_at=2, parked=(2,))
    done = rules.operator_skipped(state, 2, end=True, now=clock.now(), retention=RETENTION)
    assert done.end_seq == 2 and done.is_skipped(2) and done.expire_at is not None
    assert not rules.operator_skipped(state, 2).complete


def test_the_end_and_its_expiry_survive_the_json_round_trip_and_old_records_load() -> None:
    done = complete_at(7)
    assert GroupState.from_json(done.to_json()) == done
    old = '{"last":3,"parked":[],"gap_since":null,"attempts":0,"blocked_at":null,'
    old += '"lease_token":1,"lease_until":null,"skipped":[]}'
    assert GroupState.from_json(old) == GroupState(last_processed=3, lease_token=1)


# --- the gate on the memory store -------------------------------------------------------------


def test_a_later_number_is_dead_lettered_with_the_reason_and_the_group_is_marked_complete(
    gate: FifoGate,
    store: MemoryFifoStore,
    handler: Recorder,
    sink: RecordingSink,
    clock: ManualClock,
) -> None:
    assert [deliver(gate, m) for m in (keyed(1), keyed(2, end=True))] == [GateOutcome.PROCESSED] * 2
    state = store.load(CONSUMER, "g")
    assert state.complete and state.end_seq == 2 and state.last_processed == 2
    assert state.expire_at == clock.now() + RETENTION
    assert deliver(gate, keyed(3)) is GateOutcome.DEAD_LETTERED
    [dead] = sink.on(DLQ)
    assert dead.attributes["error_reason"] == REASON_AFTER_END == "fifo_after_end"
    assert dead.attributes["fifo_seq"] == "3" and dead.data == b"g:3"
    assert "ended at 2" in dead.attributes["error_detail"]
    assert handler.seen == [1, 2]
    after = store.load(CONSUMER, "g")
    assert after.parked == () and store.parked_message(CONSUMER, "g", 3) is None  # not parked
    assert after.last_processed == 2  # the end stays the end


def test_numbers_parked_past_the_end_are_dead_lettered_when_the_end_runs(
    gate: FifoGate, store: MemoryFifoStore, handler: Recorder, sink: RecordingSink
) -> None:
    assert deliver(gate, keyed(4)) is GateOutcome.PARKED
    assert deliver(gate, keyed(3)) is GateOutcome.PARKED
    assert deliver(gate, keyed(2, end=True)) is GateOutcome.PARKED
    assert deliver(gate, keyed(1)) is GateOutcome.PROCESSED
    assert handler.seen == [1, 2]
    assert sorted(dead_letters(sink)) == [("3", REASON_AFTER_END), ("4", REASON_AFTER_END)]
    state = store.load(CONSUMER, "g")
    assert state.end_seq == 2 and state.parked == ()
    assert store.parked_message(CONSUMER, "g", 3) is None
    assert store.parked_message(CONSUMER, "g", 4) is None


def test_duplicates_fillers_and_late_skips_up_to_the_end_behave_as_before(
    gate: FifoGate, handler: Recorder, sink: RecordingSink
) -> None:
    for message in (keyed(1), filler(2), keyed(3, end=True)):
        deliver(gate, message)
    assert deliver(gate, keyed(3, end=True)) is GateOutcome.DUPLICATE  # the end, redelivered
    assert deliver(gate, keyed(1)) is GateOutcome.DUPLICATE
    assert deliver(gate, filler(2)) is GateOutcome.DUPLICATE
    # A different message at a number already taken is still a reused number, not after_end.
    assert deliver(gate, keyed(1, "other")) is GateOutcome.DEAD_LETTERED
    assert dead_letters(sink) == [("1", fifo_policy.REASON_SEQUENCE_REUSED)]
    assert handler.seen == [1, 3]


def test_a_renumbered_retry_of_the_end_is_a_duplicate_not_a_dead_letter(
    gate: FifoGate, handler: Recorder, sink: RecordingSink
) -> None:
    # The end's publish timed out although Pub/Sub had it; the retry got the next number.
    deliver(gate, keyed(1))
    deliver(gate, keyed(2, "k-end", end=True))
    assert deliver(gate, keyed(3, "k-end", end=True)) is GateOutcome.DUPLICATE
    assert sink.on(DLQ) == [] and handler.seen == [1, 2]


def test_a_renumbered_retry_parked_before_the_end_ran_is_dropped_as_a_duplicate(
    gate: FifoGate, store: MemoryFifoStore, handler: Recorder, sink: RecordingSink
) -> None:
    assert deliver(gate, keyed(3, "k-end", end=True)) is GateOutcome.PARKED
    assert deliver(gate, keyed(2, "k-end", end=True)) is GateOutcome.PARKED
    assert deliver(gate, keyed(1)) is GateOutcome.PROCESSED
    assert handler.seen == [1, 2] and sink.on(DLQ) == []
    assert store.load(CONSUMER, "g").parked == ()
    assert store.parked_message(CONSUMER, "g", 3) is None


def test_a_filler_past_the_end_is_acked_and_not_dead_lettered(
    gate: FifoGate, sink: RecordingSink
) -> None:
    deliver(gate, keyed(1, end=True))
    assert deliver(gate, filler(2)) is GateOutcome.FILLED
    assert sink.on(DLQ) == []


def test_a_dead_letter_after_the_end_happens_once_however_often_it_is_redelivered(
    gate: FifoGate, sink: RecordingSink, clock: ManualClock
) -> None:
    dedup = IdempotentProcessor(
        MemoryDedupStore(clock=clock),
        namespace=CONSUMER,
        lease=timedelta(seconds=30),
        ttl=RETENTION,
        clock=clock,
    )
    processor = MessageProcessor(handler=lambda _m: None, dedup=dedup, gate=gate)
    processor.process(keyed(1, end=True))
    assert [processor.process(keyed(2)) for _ in range(3)] == ["dead_lettered"] * 3
    assert dead_letters(sink) == [("2", REASON_AFTER_END)]


def test_a_complete_groups_state_expires_after_the_retention_without_a_rollback_alert(
    gate: FifoGate,
    store: MemoryFifoStore,
    clock: ManualClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    deliver(gate, keyed(1, end=True))
    clock.advance(RETENTION - timedelta(seconds=1))
    assert store.load(CONSUMER, "g").complete  # the tombstone still refuses late numbers
    assert store.groups(CONSUMER) == []  # nothing to sweep: a tombstone is not listed
    clock.advance(timedelta(seconds=1))
    assert store.load(CONSUMER, "g") == GroupState()
    assert store.groups(CONSUMER) == []
    assert gate.sweep("g").outcome is GateOutcome.IDLE
    assert gate.deliver(keyed(1), "g", 1).outcome is GateOutcome.PROCESSED  # gone by design
    assert "store_rollback" not in caplog.text


def test_the_tombstone_takes_the_parked_copies_left_beside_it(
    store: MemoryFifoStore, clock: ManualClock
) -> None:
    fresh = store.load(CONSUMER, "g")
    done = rules.ended(
        GroupState(last_processed=1, parked=(3,)), now=clock.now(), retention=RETENTION
    )
    assert store.save(CONSUMER, "g", done, fresh)
    store.park(CONSUMER, "g", 3, keyed(3))
    clock.advance(RETENTION)
    assert store.load(CONSUMER, "g") == GroupState()
    assert store.parked_message(CONSUMER, "g", 3) is None


def test_a_poison_end_is_dead_lettered_and_still_ends_the_group(
    store: MemoryFifoStore, handler: Recorder, clock: ManualClock, sink: RecordingSink
) -> None:
    gate = make_gate(store, handler, clock, sink, max_attempts=1)
    handler.failing.add(2)
    deliver(gate, keyed(1))
    assert deliver(gate, keyed(2, end=True)) is GateOutcome.DEAD_LETTERED
    assert store.load(CONSUMER, "g").end_seq == 2
    assert deliver(gate, keyed(3)) is GateOutcome.DEAD_LETTERED
    assert dead_letters(sink) == [("2", fifo_policy.REASON_POISON), ("3", REASON_AFTER_END)]


def test_an_operator_skipping_a_blocked_end_completes_the_group(
    store: MemoryFifoStore, handler: Recorder, clock: ManualClock, sink: RecordingSink
) -> None:
    gate = make_gate(store, handler, clock, sink, max_attempts=1, poison=PoisonPolicy.BLOCK)
    handler.failing.add(1)
    deliver(gate, keyed(1, end=True))
    assert deliver(gate, keyed(2)) is GateOutcome.BLOCKED  # parked behind the blocked end
    state = gate.skip("g", 1)
    assert state.end_seq == 1 and state.parked == ()
    assert dead_letters(sink) == [("1", fifo_policy.REASON_POISON), ("2", REASON_AFTER_END)]
    with pytest.raises(ValueError, match="complete"):
        gate.skip("g", 2)


def test_a_crash_before_the_parked_copies_were_settled_is_finished_by_the_sweep(
    gate: FifoGate, store: MemoryFifoStore, sink: RecordingSink, clock: ManualClock
) -> None:
    # The state says complete with #3 still listed: the process died after the end's advance.
    fresh = store.load(CONSUMER, "g")
    done = rules.ended(
        GroupState(last_processed=2, parked=(3,)), now=clock.now(), retention=RETENTION
    )
    assert store.save(CONSUMER, "g", done, fresh)
    store.park(CONSUMER, "g", 3, keyed(3))
    assert gate.sweep("g").outcome is GateOutcome.IDLE
    assert dead_letters(sink) == [("3", REASON_AFTER_END)]
    assert store.load(CONSUMER, "g").parked == ()
    assert store.parked_message(CONSUMER, "g", 3) is None


def test_a_store_that_lost_the_completion_is_repaired_to_complete(
    gate: FifoGate, store: MemoryFifoStore, sink: RecordingSink
) -> None:
    deliver(gate, keyed(1))
    before_end = store.load(CONSUMER, "g")
    deliver(gate, keyed(2, end=True))
    store._states[(CONSUMER, "g")] = before_end  # a failover to a replica without the end
    assert deliver(gate, keyed(3)) is GateOutcome.DEAD_LETTERED
    assert store.load(CONSUMER, "g").end_seq == 2
    assert dead_letters(sink) == [("3", REASON_AFTER_END)]


def test_the_consumer_dead_letters_a_fifo_end_other_than_true(
    gate: FifoGate, sink: RecordingSink, clock: ManualClock
) -> None:
    dedup = IdempotentProcessor(
        MemoryDedupStore(clock=clock),
        namespace=CONSUMER,
        lease=timedelta(seconds=30),
        ttl=RETENTION,
        clock=clock,
    )
    processor = MessageProcessor(
        handler=lambda _m: None,
        dedup=dedup,
        gate=gate,
        dead_letters=DeadLetterer(sink, DLQ, DecisionLog(CONSUMER)),
    )
    assert processor.process(keyed(1, **{attr.FIFO_END: "false"})) == "dead_lettered"
    assert dead_letters(sink) == [("1", attr.REASON_INVALID_FIFO_END)]


def test_after_the_tombstone_expired_a_store_rollback_is_caught_again(
    gate: FifoGate, store: MemoryFifoStore, handler: Recorder, clock: ManualClock
) -> None:
    # The expired tombstone must not stay this process's memory of the group, or a later loss
    # of writes under the same name would go unseen (the expired record excuses every read).
    for message in (keyed(1), keyed(2), keyed(3, end=True)):
        deliver(gate, message)
    clock.advance(RETENTION)
    assert deliver(gate, keyed(1, "k-new")) is GateOutcome.PROCESSED  # behind the old end
    del store._states[(CONSUMER, "g")]  # the store loses the group's record
    assert deliver(gate, keyed(1, "k-new")) is GateOutcome.DUPLICATE
    assert handler.seen == [1, 2, 3, 1]  # the new group's #1 once


def test_without_a_dead_letter_topic_a_copy_parked_past_the_end_goes_to_the_operator_whole(
    store: MemoryFifoStore,
    handler: Recorder,
    clock: ManualClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Acked when parked, then found past the end, and no topic to keep it: the ALERT carries
    the message itself (simulation seed 91788 lost it behind a bare ALERT)."""
    gate = FifoGate(store, consumer=CONSUMER, handler=handler, clock=clock)
    stray = keyed(3, "stray", color="blue")
    assert deliver(gate, stray) is GateOutcome.PARKED
    assert deliver(gate, keyed(2, end=True)) is GateOutcome.PARKED
    assert deliver(gate, keyed(1)) is GateOutcome.PROCESSED
    handed = [
        r
        for r in caplog.records
        if getattr(r, "decision", {}).get("outcome") == "after_end_dropped"
    ]
    assert len(handed) == 1 and "ALERT" in handed[0].getMessage()
    fields = handed[0].decision  # type: ignore[attr-defined]
    assert fields["dedup_key"] == "stray" and fields["attributes"] == dict(stray.attributes)
    assert base64.b64decode(fields["data_base64"]) == stray.data
    assert store.parked_message(CONSUMER, "g", 3) is None  # handed over, not kept twice
    assert handler.seen == [1, 2]
