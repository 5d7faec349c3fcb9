"""What the FIFO gate costs its store, counted (bench/counting.py), and the rules that keep it
low without giving up a guarantee:

* a held lease (``lease_hold``): an advance keeps the group's lease (the same one write) and
  the group's next delivery runs under it - one state write per in-order message, not two; an
  unused lease just expires (no write), another process's copy parks and this process's
  sweeper runs it; a gap behind a held lease gives it back (an operator may have to skip);
* no unpark for a number that was never parked;
* idle records expire a retention after their last change; a sweep visits only the groups
  that need attention; and a delivery older than the retention for a group without a record
  is dead-lettered (``fifo_state_expired``), never run again.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from bench.counting import CountingFifoStore
from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.core.fifo_policy import REASON_STATE_EXPIRED, GateOutcome, GatePolicy
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.support.sinks import RecordingSink

CONSUMER = "consumer-a"
DLQ = "projects/p/topics/dlq"
RETENTION = timedelta(days=8)
HOLD = timedelta(seconds=2)


def message(seq: int, group: str = "g", *, published: object = None) -> Message:
    attributes = {"fifo_group": group, "fifo_seq": str(seq), "dedup_key": f"{group}-k{seq}"}
    return Message(
        f"{group}:{seq}".encode(),
        attributes,
        message_id=f"{group}-m{seq}",
        publish_time=published,  # type: ignore[arg-type]
    )


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def store(clock: ManualClock) -> CountingFifoStore:
    return CountingFifoStore(MemoryFifoStore(clock=clock))


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


def make_gate(
    store: CountingFifoStore,
    clock: ManualClock,
    sink: RecordingSink,
    seen: list[str],
    *,
    hold: timedelta = HOLD,
) -> FifoGate:
    log = DecisionLog(CONSUMER)
    return FifoGate(
        store,  # type: ignore[arg-type]  # a FifoStore by shape
        consumer=CONSUMER,
        handler=lambda m: seen.append(m.data.decode()),
        dead_letters=DeadLetterer(sink, DLQ, log),
        policy=GatePolicy(completed_retention=RETENTION, lease_hold=hold),
        clock=clock,
        log=log,
    )


def deliver(gate: FifoGate, m: Message) -> GateOutcome:
    return gate.deliver(m, m.attributes["fifo_group"], int(m.attributes["fifo_seq"])).outcome


@pytest.mark.parametrize(("hold", "writes"), [(HOLD, 51), (timedelta(0), 100)])
def test_in_order_deliveries_cost_one_write_each_under_a_held_lease(
    store: CountingFifoStore,
    clock: ManualClock,
    sink: RecordingSink,
    hold: timedelta,
    writes: int,
) -> None:
    seen: list[str] = []
    gate = make_gate(store, clock, sink, seen, hold=hold)
    for seq in range(1, 51):
        assert deliver(gate, message(seq)) is GateOutcome.PROCESSED
        clock.advance(timedelta(milliseconds=100))  # the next one comes within the hold
    assert seen == [f"g:{n}" for n in range(1, 51)]
    # Held: one lease for the run, then one advance per message (n + 1 for n); without the
    # hold, a lease and an advance each. Never a park or an unpark for an in-order message.
    assert store.writes == writes
    assert store.calls["park"] == store.calls["unpark"] == 0


def test_a_held_lease_is_never_given_back_by_a_write_and_keeps_nobody_waiting(
    store: CountingFifoStore, clock: ManualClock, sink: RecordingSink
) -> None:
    seen_a: list[str] = []
    seen_b: list[str] = []
    a = make_gate(store, clock, sink, seen_a)
    b = make_gate(store, clock, sink, seen_b)
    assert deliver(a, message(1)) is GateOutcome.PROCESSED
    assert a.groups() == []  # nothing to sweep: the held lease needs no visit
    store.reset()
    clock.advance(HOLD * 3)
    assert a.groups() == [] and store.writes == 0  # unused: no release write
    # B's copy of #2 meets A's (still live) lease: parked, so the group is listed, and A's
    # sweep runs it under a new lease of its own (one write, a new fencing token).
    token = store.load(CONSUMER, "g").lease_token
    assert deliver(b, message(2)) is GateOutcome.IN_PROGRESS
    assert a.groups() == ["g"]
    assert a.sweep("g").outcome is GateOutcome.PROCESSED
    assert store.load(CONSUMER, "g").lease_token == token + 1
    assert seen_a == ["g:1", "g:2"] and seen_b == []


def test_release_held_gives_every_held_lease_back(
    store: CountingFifoStore, clock: ManualClock, sink: RecordingSink
) -> None:
    gate = make_gate(store, clock, sink, [])
    for group in ("a", "b"):
        deliver(gate, message(1, group))
    assert all(store.load(CONSUMER, g).lease_live(clock.now()) for g in ("a", "b"))
    gate.release_held()  # a consumer stopping
    assert not any(store.load(CONSUMER, g).lease_live(clock.now()) for g in ("a", "b"))


def test_a_held_lease_too_old_for_a_handler_is_renewed_before_the_run(
    store: CountingFifoStore, clock: ManualClock, sink: RecordingSink
) -> None:
    seen: list[str] = []
    gate = make_gate(store, clock, sink, seen)
    deliver(gate, message(1))
    clock.advance(HOLD)  # the hold is over: the handler would have less than lease - hold
    token = store.load(CONSUMER, "g").lease_token
    store.reset()
    assert deliver(gate, message(2)) is GateOutcome.PROCESSED
    assert store.load(CONSUMER, "g").lease_token == token + 1  # a new lease for this run
    assert store.calls["save"] == 2 and store.calls["park"] == 0  # renew, advance
    assert seen == ["g:1", "g:2"]


def test_a_gap_behind_a_held_lease_gives_it_back_so_an_operator_can_skip(
    store: CountingFifoStore, clock: ManualClock, sink: RecordingSink
) -> None:
    seen: list[str] = []
    gate = make_gate(store, clock, sink, seen)
    deliver(gate, message(1))
    assert deliver(gate, message(3)) is GateOutcome.PARKED  # #2 missing
    assert gate.groups() == ["g"]
    gate.sweep("g")  # the gap is noticed: the held lease is given back
    assert not store.load(CONSUMER, "g").lease_live(clock.now())
    gate.skip("g", 2)  # the operator's skip is not refused as "being processed"
    assert seen == ["g:1", "g:3"]


def test_an_idle_groups_record_expires_and_a_sweep_visits_only_groups_with_work(
    store: CountingFifoStore, clock: ManualClock, sink: RecordingSink
) -> None:
    gate = make_gate(store, clock, sink, [])
    for n in range(200):
        deliver(gate, message(1, f"idle-{n}"))
    for n in range(3):
        deliver(gate, message(2, f"busy-{n}"))  # #1 missing: parked
    idle = store.load(CONSUMER, "idle-0")
    assert idle.expire_at == clock.now() + RETENTION
    assert store.load(CONSUMER, "busy-0").expire_at is None  # needs attention: kept
    store.reset()
    groups = gate.groups()
    for group in groups:
        gate.sweep(group)
    assert groups == ["busy-0", "busy-1", "busy-2"]
    assert store.reads == 3 + 3  # the listing (3 groups) and one load each
    clock.advance(RETENTION)
    assert store.load(CONSUMER, "idle-0").version is None  # gone by design


def test_an_old_redelivery_for_an_expired_group_is_dead_lettered_not_run_again(
    store: CountingFifoStore, clock: ManualClock, sink: RecordingSink
) -> None:
    seen: list[str] = []
    gate = make_gate(store, clock, sink, seen)
    first = message(1, published=clock.now())
    assert deliver(gate, first) is GateOutcome.PROCESSED
    clock.advance(RETENTION + timedelta(seconds=1))
    assert store.load(CONSUMER, "g").version is None  # the idle record expired
    assert deliver(gate, first) is GateOutcome.DEAD_LETTERED  # redelivered after all: kept
    assert sink.on(DLQ)[-1].attributes["error_reason"] == REASON_STATE_EXPIRED
    # A new message of the group (published now) starts it afresh.
    assert deliver(gate, message(1, "h", published=clock.now())) is GateOutcome.PROCESSED
    assert seen == ["g:1", "h:1"]


def test_holding_is_the_streaming_consumers_choice_unless_the_settings_make_it(
    store: CountingFifoStore, clock: ManualClock
) -> None:
    """Unset, no lease is held (a push function's next delivery may reach another instance,
    which would wait for it); the streaming Consumer turns holding on; a setting wins."""
    from pubsub_toolkit.config import ConsumerSettings
    from pubsub_toolkit.consumer.processor import gate_policy

    assert ConsumerSettings.from_env({"PUBSUB_TOOLKIT_CONSUMER_ID": "c"}).lease_hold is None
    assert ConsumerSettings.from_env(
        {"PUBSUB_TOOLKIT_CONSUMER_ID": "c", "PUBSUB_TOOLKIT_FIFO_LEASE_HOLD_SECONDS": "0"}
    ).lease_hold == timedelta(0)
    policy = gate_policy(ConsumerSettings(consumer_id="c"))
    gate = FifoGate(store, consumer=CONSUMER, handler=lambda _m: None, policy=policy, clock=clock)  # type: ignore[arg-type]
    deliver(gate, message(1))
    assert store.load(CONSUMER, "g").lease_until is None  # freed with the advance
    gate.use_lease_hold(HOLD)  # what Consumer does before it starts
    deliver(gate, message(2))
    assert store.load(CONSUMER, "g").lease_live(clock.now())  # held for the next delivery
    chosen = gate_policy(ConsumerSettings(consumer_id="c", lease_hold=timedelta(0)))
    other = FifoGate(store, consumer=CONSUMER, handler=lambda _m: None, policy=chosen, clock=clock)  # type: ignore[arg-type]
    other.use_lease_hold(HOLD)
    assert other.policy.lease_hold == timedelta(0)  # the setting's choice stands
