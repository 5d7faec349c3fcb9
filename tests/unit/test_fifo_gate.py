"""The FIFO gate on the in-memory store: parking, gaps, poison, operator actions.

In order and once (a duplicate never reaching the handler) is the core's table
(tests/unit/test_fifo_core_effects.py) and, under shuffles, copies and crashes, the
simulation's invariants; docs/reference/testing.md, "The pyramid"."""

from __future__ import annotations

import base64
from collections import defaultdict
from datetime import timedelta
from typing import Any

import pytest

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate import EarlyArrivalError, FifoGate, HandlerFailedError
from pubsub_toolkit.consumer.processor import MessageProcessor
from pubsub_toolkit.core.fifo_policy import GapPolicy, GateOutcome, GatePolicy, PoisonPolicy
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor
from pubsub_toolkit.errors import StaleClaimError, StoreUnavailableError
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.support.sinks import RecordingSink

DLQ = "projects/p/topics/dlq"


def msg(group: str, seq: int) -> Message:
    return Message(f"{group}:{seq}".encode(), {"fifo_group": group, "fifo_seq": str(seq)})


class Recorder:
    """A handler that records what it saw, and can be told to fail for some numbers."""

    def __init__(self) -> None:
        self.seen: dict[str, list[int]] = defaultdict(list)
        self.failing: set[tuple[str, int]] = set()

    def __call__(self, message: Message) -> None:
        group, seq = message.attributes["fifo_group"], int(message.attributes["fifo_seq"])
        if (group, seq) in self.failing:
            raise RuntimeError(f"cannot handle {group}#{seq}")
        self.seen[group].append(seq)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def handler() -> Recorder:
    return Recorder()


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


def make_gate(
    handler: Recorder,
    clock: ManualClock,
    sink: RecordingSink,
    store: MemoryFifoStore | None = None,
    **policy: object,
) -> FifoGate:
    log = DecisionLog("consumer-a")
    return FifoGate(
        store or MemoryFifoStore(),
        consumer="consumer-a",
        handler=handler,
        dead_letters=DeadLetterer(sink, DLQ, log),
        policy=GatePolicy(**policy),  # type: ignore[arg-type]
        clock=clock,
        log=log,
    )


def deliver(gate: FifoGate, group: str, seq: int) -> GateOutcome:
    return gate.deliver(msg(group, seq), group, seq).outcome


def test_early_arrivals_park_and_drain_when_the_gap_fills(
    handler: Recorder, clock: ManualClock, sink: RecordingSink
) -> None:
    store = MemoryFifoStore()
    gate = make_gate(handler, clock, sink, store)
    assert [deliver(gate, "g", s) for s in (3, 5, 4, 3)] == [GateOutcome.PARKED] * 4
    assert handler.seen["g"] == []
    assert store.load("consumer-a", "g").parked == (3, 4, 5)
    result = gate.deliver(msg("g", 1), "g", 1)
    assert (result.outcome, result.released) == (GateOutcome.PROCESSED, 0)
    result = gate.deliver(msg("g", 2), "g", 2)
    assert (result.outcome, result.released) == (GateOutcome.PROCESSED, 3)
    assert handler.seen["g"] == [1, 2, 3, 4, 5]
    state = store.load("consumer-a", "g")
    assert (state.last_processed, state.parked, state.gap_since) == (5, (), None)
    assert store.parked_message("consumer-a", "g", 4) is None


def test_nack_mode_refuses_early_arrivals(
    handler: Recorder, clock: ManualClock, sink: RecordingSink
) -> None:
    gate = make_gate(handler, clock, sink, park=False)
    with pytest.raises(EarlyArrivalError):
        deliver(gate, "g", 2)
    assert deliver(gate, "g", 1) == GateOutcome.PROCESSED


def test_gap_timeout_wait_alerts_and_keeps_waiting(
    handler: Recorder, clock: ManualClock, sink: RecordingSink
) -> None:
    gate = make_gate(handler, clock, sink, gap_timeout=timedelta(minutes=1), gap=GapPolicy.WAIT)
    deliver(gate, "g", 1)
    deliver(gate, "g", 3)
    clock.advance(timedelta(minutes=2))
    assert gate.sweep("g").outcome is GateOutcome.IDLE
    assert gate.log.metrics.get("gap_timeout") == 1
    assert handler.seen["g"] == [1]
    assert deliver(gate, "g", 2) == GateOutcome.PROCESSED
    assert handler.seen["g"] == [1, 2, 3]


def test_a_gap_that_keeps_waiting_is_reported_at_each_doubling_of_its_age_not_every_sweep(
    handler: Recorder, clock: ManualClock, sink: RecordingSink
) -> None:
    # A consumer sweeps about once a second: an ALERT per sweep was 3,600 lines an hour per
    # stuck group. Reported when the gap times out, then at 2x, 4x, 8x... its timeout.
    gate = make_gate(handler, clock, sink, gap_timeout=timedelta(minutes=1), gap=GapPolicy.WAIT)
    deliver(gate, "g", 1)
    deliver(gate, "g", 3)  # the gap opens now: #2 is missing
    for _ in range(600):  # ten minutes of sweeps
        clock.advance(timedelta(seconds=1))
        gate.sweep("g")
    assert gate.log.metrics.get("gap_timeout") == 4  # at 1, 2, 4 and 8 minutes
    assert deliver(gate, "g", 2) == GateOutcome.PROCESSED
    deliver(gate, "g", 5)  # a new gap: reported afresh when it times out
    clock.advance(timedelta(seconds=61))
    gate.sweep("g")
    assert gate.log.metrics.get("gap_timeout") == 5
    assert handler.seen["g"] == [1, 2, 3]


def test_gap_timeout_skip_passes_over_the_gap_with_tombstones(
    handler: Recorder, clock: ManualClock, sink: RecordingSink
) -> None:
    store = MemoryFifoStore()
    gate = make_gate(
        handler, clock, sink, store, gap_timeout=timedelta(minutes=1), gap=GapPolicy.SKIP
    )
    deliver(gate, "g", 1)
    deliver(gate, "g", 4)
    deliver(gate, "g", 5)
    clock.advance(timedelta(seconds=30))
    assert gate.sweep("g").outcome is GateOutcome.IDLE  # not yet timed out
    clock.advance(timedelta(seconds=31))
    assert gate.sweep("g").outcome is GateOutcome.PROCESSED
    assert handler.seen["g"] == [1, 4, 5]
    state = store.load("consumer-a", "g")
    assert (state.last_processed, state.skipped) == (5, ((2, 3),))
    # A skipped number that turns up after all was never processed: kept, with the reason.
    assert deliver(gate, "g", 2) == GateOutcome.DEAD_LETTERED
    assert [m.attributes["error_reason"] for m in sink.on(DLQ)] == ["fifo_late_after_skip"]


def test_poison_is_dead_lettered_after_max_attempts_and_skipped(
    handler: Recorder, clock: ManualClock, sink: RecordingSink
) -> None:
    gate = make_gate(handler, clock, sink, max_attempts=3, poison=PoisonPolicy.SKIP)
    handler.failing.add(("g", 2))
    deliver(gate, "g", 1)
    deliver(gate, "g", 3)  # parked behind the poison
    with pytest.raises(HandlerFailedError):
        deliver(gate, "g", 2)  # nacked once; a copy is parked for the sweeper
    assert deliver(gate, "g", 2) == GateOutcome.RETRYING  # redelivered during the backoff
    clock.advance(timedelta(seconds=5))
    assert gate.sweep("g").outcome is GateOutcome.RETRYING  # second failure
    assert sink.on(DLQ) == []
    clock.advance(timedelta(seconds=9))
    assert gate.sweep("g").outcome is GateOutcome.IDLE  # still backing off (10 s)
    clock.advance(timedelta(seconds=1))
    assert gate.sweep("g").outcome is GateOutcome.DEAD_LETTERED  # third failure: poison
    [dead] = sink.on(DLQ)
    assert dead.attributes["error_reason"] == "fifo_poison"
    assert dead.attributes["fifo_group"] == "g" and dead.attributes["fifo_seq"] == "2"
    assert handler.seen["g"] == [1, 3]


@pytest.mark.parametrize("max_attempts", [1, 3])
def test_a_poison_message_skipped_is_reported_dead_lettered_never_processed(
    handler: Recorder, clock: ManualClock, sink: RecordingSink, max_attempts: int
) -> None:
    """Honest outcomes: what the processor (and so the Consumer) reports for a poison message
    is ``dead_lettered`` - at the skip and for every copy redelivered after it - and the
    message is on the dead-letter topic once, as poison (not again as a late arrival)."""
    gate = make_gate(handler, clock, sink, max_attempts=max_attempts, poison=PoisonPolicy.SKIP)
    log = DecisionLog("consumer-a")
    processor = MessageProcessor(
        handler=handler,
        dedup=IdempotentProcessor(
            MemoryDedupStore(clock),
            namespace="consumer-a",
            lease=timedelta(seconds=60),
            ttl=timedelta(days=1),
            clock=clock,
        ),
        gate=gate,
        dead_letters=DeadLetterer(sink, DLQ, log),
    )
    handler.failing.add(("g", 1))
    poison = keyed("g", 1, "order-1")
    outcomes = []
    for _ in range(max_attempts - 1):
        with pytest.raises(HandlerFailedError):
            processor.process(poison)
        clock.advance(timedelta(minutes=10))  # past the backoff: this copy runs again
    outcomes.append(processor.process(poison))  # the last attempt: poison, skipped
    assert gate.sweep("g").outcome is GateOutcome.IDLE
    outcomes += [processor.process(poison) for _ in range(3)]  # copies redelivered later
    assert outcomes == ["dead_lettered"] * 4
    assert [m.attributes["error_reason"] for m in sink.on(DLQ)] == ["fifo_poison"]
    # The group went on; a different message claiming the skipped number is still refused.
    assert processor.process(keyed("g", 2, "order-2")) == "processed"
    assert processor.process(keyed("g", 1, "impostor")) == "dead_lettered"
    assert [m.attributes["error_reason"] for m in sink.on(DLQ)][-1] == "fifo_sequence_reused"
    assert handler.seen["g"] == [2]


def test_poison_blocks_then_operator_skip_resumes(
    handler: Recorder, clock: ManualClock, sink: RecordingSink
) -> None:
    store = MemoryFifoStore()
    gate = make_gate(handler, clock, sink, store, max_attempts=2, poison=PoisonPolicy.BLOCK)
    handler.failing.add(("g", 1))
    with pytest.raises(HandlerFailedError):
        deliver(gate, "g", 1)
    clock.advance(timedelta(seconds=5))
    assert gate.sweep("g").outcome is GateOutcome.DEAD_LETTERED
    assert deliver(gate, "g", 2) == GateOutcome.BLOCKED
    assert store.load("consumer-a", "g").blocked_at == 1
    assert handler.seen["g"] == []
    gate.skip("g", 1)
    assert handler.seen["g"] == [2]
    assert store.load("consumer-a", "g").skipped == ((1, 1),)
    assert len(sink.on(DLQ)) == 1


def test_poison_blocks_then_operator_replay_after_the_fix(
    handler: Recorder, clock: ManualClock, sink: RecordingSink
) -> None:
    gate = make_gate(handler, clock, sink, max_attempts=1, poison=PoisonPolicy.BLOCK)
    handler.failing.add(("g", 1))
    assert deliver(gate, "g", 1) == GateOutcome.DEAD_LETTERED
    deliver(gate, "g", 2)
    handler.failing.clear()  # the operator fixed the cause
    assert gate.replay("g").outcome is GateOutcome.PROCESSED
    assert handler.seen["g"] == [1, 2]
    with pytest.raises(ValueError, match="waits for 3"):
        gate.skip("g", 1)


def test_a_failed_parked_message_is_retried_by_the_sweeper(
    handler: Recorder, clock: ManualClock, sink: RecordingSink
) -> None:
    gate = make_gate(handler, clock, sink, max_attempts=5)
    handler.failing.add(("g", 2))
    deliver(gate, "g", 2)  # parked
    assert deliver(gate, "g", 1) == GateOutcome.PROCESSED  # 1 runs, 2 fails while draining
    assert handler.seen["g"] == [1]
    handler.failing.clear()
    assert gate.sweep("g").outcome is GateOutcome.IDLE  # backing off
    clock.advance(timedelta(seconds=5))
    assert gate.sweep("g").outcome is GateOutcome.PROCESSED
    assert handler.seen["g"] == [1, 2]


def test_a_handler_that_outlives_its_lease_is_fenced(
    clock: ManualClock, sink: RecordingSink
) -> None:
    store = MemoryFifoStore()
    seen: list[int] = []

    def slow(message: Message) -> None:
        # While this handler runs, its lease expires and another worker takes the group over.
        clock.advance(timedelta(seconds=61))
        other = make_gate(Recorder(), clock, sink, store)
        other.deliver(msg("g", 1), "g", 1)
        seen.append(1)

    gate = FifoGate(store, consumer="consumer-a", handler=slow, clock=clock)
    with pytest.raises(StaleClaimError):
        gate.deliver(msg("g", 1), "g", 1)
    assert store.load("consumer-a", "g").last_processed == 1  # only the new holder advanced


def test_a_copy_of_a_running_head_is_kept_so_a_dead_holder_loses_nothing(
    handler: Recorder, clock: ManualClock, sink: RecordingSink
) -> None:
    from dataclasses import replace

    store = MemoryFifoStore()
    gate = make_gate(handler, clock, sink, store)
    # Another worker leased the head (1) and then died without a word.
    fresh = store.load("consumer-a", "g")
    dead_holder = replace(fresh, lease_token=1, lease_until=clock.now() + timedelta(seconds=60))
    assert store.save("consumer-a", "g", dead_holder, fresh)
    assert deliver(gate, "g", 1) == GateOutcome.IN_PROGRESS  # acked, but a copy is parked
    assert handler.seen["g"] == []
    clock.advance(timedelta(seconds=61))  # the dead holder's lease runs out
    assert gate.sweep("g").outcome is GateOutcome.PROCESSED
    assert handler.seen["g"] == [1]
    assert store.load("consumer-a", "g").parked == ()


def test_a_long_backlog_renews_the_lease_so_no_one_else_runs_it_twice(
    clock: ManualClock, sink: RecordingSink
) -> None:
    store = MemoryFifoStore()
    runs: list[tuple[str, int]] = []
    other = make_gate(Recorder(), clock, sink, store)

    def slow(message: Message) -> None:
        seq = int(message.attributes["fifo_seq"])
        runs.append(("A", seq))
        clock.advance(timedelta(seconds=25))  # each run well inside the 60 s lease
        if seq == 4:
            assert other.sweep("g").outcome is GateOutcome.IDLE  # the lease is still ours

    gate = FifoGate(store, consumer="consumer-a", handler=slow, clock=clock)
    for seq in (2, 3, 4, 5):
        gate.deliver(msg("g", seq), "g", seq)
    assert gate.deliver(msg("g", 1), "g", 1).released == 4
    assert runs == [("A", 1), ("A", 2), ("A", 3), ("A", 4), ("A", 5)]


def test_an_operator_cannot_skip_a_number_that_is_running(
    clock: ManualClock, sink: RecordingSink
) -> None:
    store = MemoryFifoStore()
    refused: list[str] = []

    def handler(message: Message) -> None:
        operator = make_gate(Recorder(), clock, sink, store)
        try:
            operator.skip("g", 1, run=False)
        except ValueError as exc:
            refused.append(str(exc))

    FifoGate(store, consumer="consumer-a", handler=handler, clock=clock).deliver(
        msg("g", 1), "g", 1
    )
    assert refused and "being processed" in refused[0]
    assert store.load("consumer-a", "g").last_processed == 1


def test_a_store_error_after_a_successful_handler_is_not_counted_as_poison(
    clock: ManualClock, sink: RecordingSink
) -> None:
    from pubsub_toolkit.errors import StoreUnavailableError

    class BlippingStore(MemoryFifoStore):
        fail_next = False

        def save(self, *args: Any) -> bool:
            if self.fail_next:
                self.fail_next = False
                raise StoreUnavailableError("blip")
            return super().save(*args)

    store = BlippingStore()

    def handler(message: Message) -> None:
        store.fail_next = True  # the advance after this successful run hits a store hiccup

    gate = make_gate(Recorder(), clock, sink, store, max_attempts=1)
    gate._handler = handler
    # The advance is retried after a short wait, so the blip costs nothing.
    assert gate.deliver(msg("g", 1), "g", 1).outcome is GateOutcome.PROCESSED
    assert sink.on(DLQ) == []  # not dead-lettered as poison
    state = store.load("consumer-a", "g")
    assert (state.attempts, state.last_processed) == (0, 1)

    class DownStore(MemoryFifoStore):
        down = False

        def save(self, *args: Any) -> bool:
            if self.down:
                raise StoreUnavailableError("down")
            return super().save(*args)

    down = DownStore()

    def breaks_the_store(message: Message) -> None:
        down.down = True  # the store goes away for good after this successful run

    gate = make_gate(Recorder(), clock, sink, down, max_attempts=1)
    gate._handler = breaks_the_store
    with pytest.raises(StoreUnavailableError):
        gate.deliver(msg("g", 1), "g", 1)
    assert sink.on(DLQ) == []  # redelivered later, never counted as poison


def keyed(group: str, seq: int, key: str, **extra: str) -> Message:
    return Message(
        f"{key}".encode(), {"fifo_group": group, "fifo_seq": str(seq), "dedup_key": key, **extra}
    )


def test_a_filler_moves_the_group_past_its_number_without_the_handler(
    handler: Recorder, clock: ManualClock, sink: RecordingSink
) -> None:
    gate = make_gate(handler, clock, sink)
    deliver(gate, "g", 1)
    filler = keyed("g", 3, "k2", fifo_filler="duplicate_of:2")
    assert gate.deliver(filler, "g", 3).outcome is GateOutcome.PARKED
    assert gate.deliver(keyed("g", 4, "k4"), "g", 4).outcome is GateOutcome.PARKED
    result = gate.deliver(keyed("g", 2, "k2"), "g", 2)
    assert (result.outcome, result.released) == (GateOutcome.PROCESSED, 2)
    assert handler.seen["g"] == [1, 2, 4]  # 3 carried no message
    assert gate.deliver(filler, "g", 3).outcome is GateOutcome.DUPLICATE


def test_a_different_message_at_a_taken_number_is_dead_lettered_with_an_alert(
    handler: Recorder, clock: ManualClock, sink: RecordingSink, caplog: pytest.LogCaptureFixture
) -> None:
    gate = make_gate(handler, clock, sink)
    assert gate.deliver(keyed("g", 1, "a"), "g", 1).outcome is GateOutcome.PROCESSED
    assert gate.deliver(keyed("g", 1, "a"), "g", 1).outcome is GateOutcome.DUPLICATE
    # Behind the head (a counter rolled back, a producer reusing numbers) ...
    assert gate.deliver(keyed("g", 1, "b"), "g", 1).outcome is GateOutcome.DEAD_LETTERED
    # ... and ahead of it, while the first copy is parked.
    assert gate.deliver(keyed("g", 3, "c"), "g", 3).outcome is GateOutcome.PARKED
    assert gate.deliver(keyed("g", 3, "d"), "g", 3).outcome is GateOutcome.DEAD_LETTERED
    assert [m.attributes["error_reason"] for m in sink.on(DLQ)] == ["fifo_sequence_reused"] * 2
    assert [m.attributes["dedup_key"] for m in sink.on(DLQ)] == ["b", "d"]
    assert sum("ALERT" in r.getMessage() for r in caplog.records) == 2
    gate.deliver(keyed("g", 2, "e"), "g", 2)
    assert handler.seen["g"] == [1, 2, 3]  # "c" ran as #3, "d" never


def test_every_skipped_number_is_remembered_however_many(
    handler: Recorder, clock: ManualClock, sink: RecordingSink
) -> None:
    store = MemoryFifoStore()
    gate = make_gate(handler, clock, sink, store)
    for seq in range(1, 302):
        if seq % 2:
            gate.skip("g", seq, run=False)  # 151 tombstones, far past the old limit of 100
        else:
            deliver(gate, "g", seq)
    assert store.load("consumer-a", "g").is_skipped(1)
    assert deliver(gate, "g", 1) == GateOutcome.DEAD_LETTERED  # late, not a duplicate
    assert sink.on(DLQ)[-1].attributes["error_reason"] == "fifo_late_after_skip"
    assert deliver(gate, "g", 2) == GateOutcome.DUPLICATE


def test_without_a_dead_letter_topic_poison_blocks_instead_of_skipping_silently(
    clock: ManualClock,
) -> None:
    store = MemoryFifoStore()
    handler = Recorder()
    handler.failing.add(("g", 1))
    gate = FifoGate(
        store,
        consumer="consumer-a",
        handler=handler,
        policy=GatePolicy(max_attempts=1, poison=PoisonPolicy.SKIP),
        clock=clock,
    )
    assert gate.deliver(msg("g", 1), "g", 1).outcome is GateOutcome.BLOCKED
    assert store.load("consumer-a", "g").blocked_at == 1
    assert gate.deliver(msg("g", 2), "g", 2).outcome is GateOutcome.BLOCKED
    assert handler.seen["g"] == []


def test_a_transient_handler_failure_backs_off_but_never_becomes_poison(
    clock: ManualClock, sink: RecordingSink
) -> None:
    from pubsub_toolkit.errors import TransientError

    outage = {"on": True}
    seen: list[int] = []

    def handler(message: Message) -> None:
        if outage["on"]:
            raise TransientError("the dependency is down")
        seen.append(int(message.attributes["fifo_seq"]))

    store = MemoryFifoStore()
    gate = make_gate(Recorder(), clock, sink, store, max_attempts=2)
    gate._handler = handler
    deliver(gate, "g", 2)
    with pytest.raises(HandlerFailedError):
        deliver(gate, "g", 1)
    waits = []
    for _ in range(12):  # an outage far longer than two attempts' worth
        state = store.load("consumer-a", "g")
        assert state.next_attempt_at is not None
        waits.append(state.next_attempt_at - clock.now())
        clock.advance(waits[-1])
        gate.sweep("g")
    assert sink.on(DLQ) == [] and store.load("consumer-a", "g").attempts == 0
    assert waits[:4] == [timedelta(seconds=s) for s in (5, 5, 5, 5)]  # uncounted: no doubling
    outage["on"] = False
    clock.advance(timedelta(minutes=5))
    gate.sweep("g")
    assert seen == [1, 2]


def test_a_store_that_lost_writes_is_caught_by_the_process_that_made_them(
    handler: Recorder, clock: ManualClock, sink: RecordingSink, caplog: pytest.LogCaptureFixture
) -> None:
    """A Redis restart without persistence: the group's state is gone, parked #5 with it."""
    store = MemoryFifoStore()
    gate = make_gate(handler, clock, sink, store)
    for seq in (1, 2, 3):
        gate.deliver(keyed("g", seq, f"k{seq}"), "g", seq)
    gate.deliver(keyed("g", 5, "k5"), "g", 5)  # parked, acked
    store._states.clear()  # the data loss
    store._parked.clear()
    # The counter restarted too: a new message is numbered 2 again.
    assert gate.deliver(keyed("g", 2, "new"), "g", 2).outcome is GateOutcome.DEAD_LETTERED
    alerts = [r.getMessage() for r in caplog.records if "ALERT" in r.getMessage()]
    assert any(
        "lost writes" in a and "parked again from this process's copies: [5]" in a for a in alerts
    )
    assert sink.on(DLQ)[-1].attributes["error_reason"] == "fifo_sequence_reused"
    state = store.load("consumer-a", "g")
    assert (state.last_processed, state.parked) == (3, (5,))  # position and #5 restored
    gate.deliver(keyed("g", 4, "k4"), "g", 4)
    assert handler.seen["g"] == [1, 2, 3, 4, 5]  # #2 never ran twice, #5 not lost


def test_a_number_the_store_forgot_and_gave_to_another_message_is_caught_by_its_witness(
    clock: ManualClock, sink: RecordingSink, caplog: pytest.LogCaptureFixture
) -> None:
    """The store loses #1's run and its counter; #1 goes to a new message that another
    process runs. The store's position then matches what this process saw (1), but not its
    history: this process ran "a" there, so "a" renumbered to #2 by its producer's retry must
    not run again (found by the simulation, seed 12562)."""
    store = MemoryFifoStore()
    mine, theirs = Recorder(), Recorder()
    gate, other = make_gate(mine, clock, sink, store), make_gate(theirs, clock, sink, store)
    assert gate.deliver(keyed("g", 1, "a"), "g", 1).outcome is GateOutcome.PROCESSED
    store._states.clear()  # the data loss
    assert other.deliver(keyed("g", 1, "b"), "g", 1).outcome is GateOutcome.PROCESSED
    assert gate.deliver(keyed("g", 2, "a"), "g", 2).outcome is GateOutcome.FILLED
    assert any(
        "ALERT" in r.getMessage() and "given again" in r.getMessage() for r in caplog.records
    )
    # Both messages that ran at #1 stay known: a renumbered copy of either fills its number.
    assert other.deliver(keyed("g", 3, "b"), "g", 3).outcome is GateOutcome.FILLED
    assert gate.deliver(keyed("g", 4, "c"), "g", 4).outcome is GateOutcome.PROCESSED
    assert (mine.seen["g"], theirs.seen["g"]) == ([1, 4], [1])


def test_a_repair_the_store_loses_at_once_is_caught_again(
    handler: Recorder, clock: ManualClock, sink: RecordingSink
) -> None:
    """The store loses writes, and then the repair too (a second loss right after it): the
    read after the repair is checked as well, so the reused number is still refused."""

    class LosesTheRepair(MemoryFifoStore):
        lose_next_save = False

        def save(self, *args: Any) -> Any:
            stored = super().save(*args)
            if self.lose_next_save and stored is not None:
                self.lose_next_save = False
                self._states.clear()  # acknowledged, then lost
            return stored

    store = LosesTheRepair()
    gate = make_gate(handler, clock, sink, store)
    gate.deliver(keyed("g", 1, "k1"), "g", 1)
    store._states.clear()  # the first loss
    store.lose_next_save = True  # the repair's write is lost as well
    assert gate.deliver(keyed("g", 1, "new"), "g", 1).outcome is GateOutcome.DEAD_LETTERED
    assert handler.seen["g"] == [1]  # #1 ran once: the other message at #1 never ran
    assert store.load("consumer-a", "g").last_processed == 1  # repaired again


def test_a_reissued_number_parked_after_a_loss_is_kept_even_if_its_dead_letter_fails_once(
    handler: Recorder, clock: ManualClock, sink: RecordingSink
) -> None:
    """Another process parks (and acks) a reissued #2 after the loss; this process repairs the
    group and must dead-letter that copy - a failure of the dead letter must not lose it."""
    store = MemoryFifoStore()
    gate = make_gate(handler, clock, sink, store)
    for seq in (1, 2):
        gate.deliver(keyed("g", seq, f"k{seq}"), "g", seq)
    store._states.clear()  # the data loss
    other = make_gate(Recorder(), clock, sink, store)  # a process that saw nothing before
    assert other.deliver(keyed("g", 2, "new"), "g", 2).outcome is GateOutcome.PARKED
    send, calls = gate._dead_letters.send, []  # type: ignore[union-attr]

    def flaky(*args: Any, **kwargs: Any) -> str:
        calls.append(args)
        if len(calls) == 1:
            raise StoreUnavailableError("the dead-letter publish timed out")
        return send(*args, **kwargs)

    gate._dead_letters.send = flaky  # type: ignore[union-attr, method-assign]
    with pytest.raises(StoreUnavailableError):
        gate.sweep("g")  # the repair finds the reissued copy; keeping it fails
    gate.sweep("g")  # the next read repairs again, and keeps it this time
    assert [m.attributes["dedup_key"] for m in sink.on(DLQ)] == ["new"]
    assert sink.on(DLQ)[0].attributes["error_reason"] == "fifo_sequence_reused"
    state = store.load("consumer-a", "g")
    assert (state.last_processed, state.parked) == (2, ())
    assert store.parked_message("consumer-a", "g", 2) is None
    assert handler.seen["g"] == [1, 2]


def test_without_a_dead_letter_topic_a_reissued_parked_copy_goes_to_the_operator_whole(
    handler: Recorder, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Acked when parked, its number then found given again, and no topic to keep it: the
    ALERT carries the message itself, so it can be published again (sim seed 65164)."""
    store = MemoryFifoStore()

    def gate_without_topic(handler: Recorder) -> FifoGate:
        return FifoGate(store, consumer="consumer-a", handler=handler, clock=clock)

    gate = gate_without_topic(handler)
    for seq in (1, 2):
        gate.deliver(keyed("g", seq, f"k{seq}"), "g", seq)
    store._states.clear()  # the data loss
    parked = keyed("g", 2, "new", color="blue")
    assert gate_without_topic(Recorder()).deliver(parked, "g", 2).outcome is GateOutcome.PARKED
    gate.sweep("g")
    handed = [
        r for r in caplog.records if getattr(r, "decision", {}).get("outcome") == "reissued_unkept"
    ]
    assert len(handed) == 1 and "ALERT" in handed[0].getMessage()
    fields = handed[0].decision  # type: ignore[attr-defined]
    assert fields["dedup_key"] == "new" and fields["attributes"] == dict(parked.attributes)
    assert base64.b64decode(fields["data_base64"]) == parked.data
    assert store.parked_message("consumer-a", "g", 2) is None  # handed over, not kept twice
    assert handler.seen["g"] == [1, 2]


def test_an_in_order_message_costs_one_state_read_and_two_writes(
    handler: Recorder, clock: ManualClock, sink: RecordingSink
) -> None:
    # The advance compare-and-sets against the state the lease write returned, so the record
    # is read once per message (not again before the advance); a rival write still wins.
    class CountingStore(MemoryFifoStore):
        loads = saves = 0

        def load(self, consumer: str, group: str) -> Any:
            self.loads += 1
            return super().load(consumer, group)

        def save(self, *args: Any) -> Any:
            self.saves += 1
            return super().save(*args)

    store = CountingStore()
    gate = make_gate(handler, clock, sink, store)
    for seq in range(1, 11):
        assert gate.deliver(msg("g", seq), "g", seq).outcome is GateOutcome.PROCESSED
    assert (store.loads, store.saves) == (10, 20)
    assert handler.seen["g"] == list(range(1, 11))

    # A park by another consumer process while the handler runs makes the advance's first
    # compare-and-set fail: the gate reads the record again and keeps the parked number.
    def parks_a_successor(message: Message) -> None:
        other = make_gate(Recorder(), clock, sink, store)
        assert other.deliver(msg("g", 13), "g", 13).outcome is GateOutcome.PARKED

    gate._handler = parks_a_successor
    assert gate.deliver(msg("g", 11), "g", 11).outcome is GateOutcome.PROCESSED
    state = store.load("consumer-a", "g")
    assert (state.last_processed, state.parked) == (11, (13,))


def test_a_renumbered_copy_of_a_poison_message_is_filled_not_run(
    handler: Recorder, clock: ManualClock, sink: RecordingSink
) -> None:
    # The producer retried a publish; the counter numbered the retry #2. #1 failed for good and
    # was dead-lettered (poison, skipped): its copy at #2 must not run after its own dead letter.
    def keyed(seq: int) -> Message:
        attributes = {"fifo_group": "g", "fifo_seq": str(seq), "dedup_key": "order-7"}
        return Message(b"order-7", attributes, message_id=f"m{seq}")

    handler.failing.add(("g", 1))
    gate = make_gate(handler, clock, sink, max_attempts=1)
    assert gate.deliver(keyed(1), "g", 1).outcome is GateOutcome.DEAD_LETTERED
    assert gate.deliver(keyed(2), "g", 2).outcome is GateOutcome.FILLED
    assert handler.seen["g"] == []  # no effect: the message's one outcome is its dead letter
    assert len(sink.on(DLQ)) == 1
