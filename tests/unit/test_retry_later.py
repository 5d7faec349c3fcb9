"""RetryLater: a handler asks for its message again after a delay (issue 14, item 5).

FIFO: the gate parks the head with ``next_attempt_at = now + delay`` on a manual clock, and the
group's later numbers wait behind it. Plain messages: the processor re-schedules a copy through
an in-process delay path of our own (the real task plan and the real Relay on the in-memory
store, released when the manual clock reaches a task's schedule time).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.consumer.processor import MessageProcessor
from pubsub_toolkit.core.fifo_policy import GateOutcome, GatePolicy, PoisonPolicy
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor
from pubsub_toolkit.delay.relay import Relay, RelayOutcome
from pubsub_toolkit.delay.scheduler import TaskPlan, plan_task
from pubsub_toolkit.errors import RetryLater, TransientError
from pubsub_toolkit.message import Message, OutboundMessage
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.support.sinks import RecordingSink

FINAL, DLQ = "projects/p/topics/final", "projects/p/topics/dlq"
TWO_HOURS = timedelta(hours=2)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime(2030, 1, 1, tzinfo=UTC))


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


def test_retry_later_takes_a_timedelta_of_any_length_and_is_transient() -> None:
    assert RetryLater(timedelta(days=45), "rate limited").delay == timedelta(days=45)
    assert isinstance(RetryLater(timedelta(0)), TransientError)
    with pytest.raises(ValueError):
        RetryLater(timedelta(seconds=-1))
    with pytest.raises(TypeError):
        RetryLater(7200)  # type: ignore[arg-type]


# --- FIFO: the gate ---------------------------------------------------------------------------


class AsksLater:
    """A handler that raises RetryLater for the numbers in ``later`` (``times`` times each)."""

    def __init__(self, later: dict[int, int], delay: timedelta = TWO_HOURS) -> None:
        self.later, self.delay, self.seen = dict(later), delay, []  # type: ignore[var-annotated]

    def __call__(self, message: Message) -> None:
        seq = int(message.attributes["fifo_seq"])
        if self.later.get(seq, 0) > 0:
            self.later[seq] -= 1
            raise RetryLater(self.delay, "not ready")
        self.seen.append(seq)


def fifo(seq: int) -> Message:
    return Message(b"x%d" % seq, {"fifo_group": "g", "fifo_seq": str(seq), "dedup_key": f"k{seq}"})


def gate_for(handler: AsksLater, clock: ManualClock, sink: RecordingSink, **policy: object):  # type: ignore[no-untyped-def]
    store = MemoryFifoStore()
    log = DecisionLog("consumer-a")
    gate = FifoGate(
        store,
        consumer="consumer-a",
        handler=handler,
        dead_letters=DeadLetterer(sink, DLQ, log),
        policy=GatePolicy(**policy),  # type: ignore[arg-type]
        clock=clock,
        log=log,
    )
    return gate, store


def test_fifo_retry_later_waits_exactly_its_delay_and_the_group_holds_its_place(
    clock: ManualClock, sink: RecordingSink
) -> None:
    handler = AsksLater({2: 1})
    gate, store = gate_for(handler, clock, sink)
    assert gate.deliver(fifo(1), "g", 1).outcome is GateOutcome.PROCESSED
    asked_at = clock.now()
    # Acked at once (no HandlerFailedError): the parked copy is the retry.
    assert gate.deliver(fifo(2), "g", 2).outcome is GateOutcome.RETRYING
    state = store.load("consumer-a", "g")
    assert state.next_attempt_at == asked_at + TWO_HOURS  # not the 5-s backoff
    assert (state.attempts, state.last_processed, state.parked) == (1, 1, (2,))
    assert [gate.deliver(fifo(s), "g", s).outcome for s in (3, 4)] == [GateOutcome.PARKED] * 2
    assert gate.deliver(fifo(2), "g", 2).outcome is GateOutcome.RETRYING  # a redelivery
    clock.advance(TWO_HOURS - timedelta(seconds=1))
    assert gate.sweep("g").outcome is GateOutcome.IDLE  # not before the due time
    assert handler.seen == [1]
    clock.advance(timedelta(seconds=1))
    result = gate.sweep("g")
    assert (result.outcome, result.seq, result.released) == (GateOutcome.PROCESSED, 2, 2)
    assert handler.seen == [1, 2, 3, 4]  # the retried head, then its successors in order
    assert sink.on(DLQ) == [] and store.load("consumer-a", "g").last_processed == 4


def test_fifo_retry_later_counts_and_becomes_poison_at_the_attempt_limit(
    clock: ManualClock, sink: RecordingSink
) -> None:
    handler = AsksLater({1: 99})
    gate, store = gate_for(handler, clock, sink, max_attempts=3, poison=PoisonPolicy.SKIP)
    assert gate.deliver(fifo(1), "g", 1).outcome is GateOutcome.RETRYING
    assert gate.deliver(fifo(2), "g", 2).outcome is GateOutcome.PARKED
    clock.advance(TWO_HOURS)
    assert gate.sweep("g").outcome is GateOutcome.RETRYING
    assert store.load("consumer-a", "g").attempts == 2
    clock.advance(TWO_HOURS)
    assert gate.sweep("g").outcome is GateOutcome.DEAD_LETTERED  # the third: poison
    [dead] = sink.on(DLQ)
    assert dead.attributes["error_reason"] == "fifo_poison"
    assert "RetryLater" in dead.attributes["error_detail"]
    assert handler.seen == [2]  # the group went on past the tombstone


# --- plain messages: the processor and an in-process delay path --------------------------


@dataclass
class InProcessTasks:
    """Our own RetryScheduler: plans tasks as production does (``plan_task``; a second
    schedule of one task id is AlreadyExists) and releases the due ones through a Relay."""

    clock: ManualClock
    tasks: dict[str, TaskPlan] = field(default_factory=dict)
    relay: Relay | None = None

    def schedule(
        self, message: OutboundMessage, deliver_at: datetime, dedup_key: str, hop: int = 0
    ) -> str:
        plan = plan_task(message, deliver_at, dedup_key, hop, now=self.clock.now())
        self.tasks.setdefault(plan.task_id, plan)
        return plan.task_id

    def run_due(self) -> list[RelayOutcome]:
        assert self.relay is not None
        due = [t for t, p in self.tasks.items() if p.schedule_time <= self.clock.now()]
        return [self.relay.release(self.tasks.pop(t).body).outcome for t in due]


@dataclass
class Plain:
    """A handler that raises RetryLater ``times`` times, then succeeds."""

    times: int = 1
    delay: timedelta = TWO_HOURS
    runs: list[Message] = field(default_factory=list)

    def __call__(self, message: Message) -> str:
        self.runs.append(message)
        if self.times > 0:
            self.times -= 1
            raise RetryLater(self.delay)
        return "done"


def processor_for(
    handler: Plain,
    clock: ManualClock,
    sink: RecordingSink,
    store: MemoryDedupStore,
    tasks: InProcessTasks | None,
    consumer: str = "consumer-a",
    max_attempts: int = 5,
) -> MessageProcessor:
    log = DecisionLog(consumer)
    dedup = IdempotentProcessor(
        store, namespace=consumer, lease=timedelta(minutes=1), ttl=timedelta(days=8), clock=clock
    )
    gate = FifoGate(MemoryFifoStore(), consumer=consumer, handler=handler, clock=clock)
    return MessageProcessor(
        handler=handler,
        dedup=dedup,
        gate=gate,
        dead_letters=DeadLetterer(sink, DLQ, log),
        scheduler=tasks,
        max_attempts=max_attempts,
        clock=clock,
    )


def delay_path(clock: ManualClock, sink: RecordingSink, store: MemoryDedupStore) -> InProcessTasks:
    tasks = InProcessTasks(clock)
    tasks.relay = Relay(
        store=store,
        sink=sink,
        final_topic=FINAL,
        dead_letter_topic=DLQ,
        lease=timedelta(minutes=1),
        ttl=timedelta(days=400),
        scheduler=tasks,
        clock=clock,
    )
    return tasks


def received(outbound: OutboundMessage, message_id: str) -> Message:
    return Message(outbound.data, outbound.attributes, message_id=message_id)


def plain(key: str = "order-1") -> Message:
    return Message(b"payload", {"dedup_key": key, "color": "blue"}, message_id="m1")


def test_plain_retry_later_is_acked_now_and_delivered_again_at_the_due_time(
    clock: ManualClock, sink: RecordingSink
) -> None:
    store = MemoryDedupStore(clock)
    tasks = delay_path(clock, sink, store)
    handler = Plain(times=1)
    processor = processor_for(handler, clock, sink, store, tasks)
    # The message was itself delayed once: the relay already has a done record for its key.
    first = OutboundMessage(b"payload", {"dedup_key": "order-1", "color": "blue"})
    tasks.schedule(first, clock.now(), "order-1")
    assert tasks.run_due() == [RelayOutcome.PUBLISHED]
    [original] = sink.on(FINAL)

    assert processor.process(received(original, "m1")) == "retry_scheduled"  # ack now
    [(_, task)] = tasks.tasks.items()
    assert task.schedule_time == clock.now() + TWO_HOURS
    clock.advance(TWO_HOURS - timedelta(seconds=3))
    assert tasks.run_due() == []  # not early
    clock.advance(timedelta(seconds=3))
    assert tasks.run_due() == [RelayOutcome.PUBLISHED]  # its own key, not the first release's
    copy = sink.on(FINAL)[1]
    assert copy.data == b"payload" and copy.attributes["dedup_key"] == "order-1"
    assert copy.attributes["retry_attempt"] == "2"
    assert copy.attributes["retry_consumer"] == "consumer-a"
    assert copy.attributes["color"] == "blue"
    # The claim was released, so the copy runs; afterwards the key is done.
    assert processor.process(received(copy, "m2")) == "processed"
    assert len(handler.runs) == 2
    assert processor.process(received(copy, "m2")) == "duplicate"
    assert processor.process(received(original, "m1")) == "duplicate"
    assert sink.on(DLQ) == []


def test_another_subscription_acks_the_retry_copy_as_a_duplicate(
    clock: ManualClock, sink: RecordingSink
) -> None:
    store = MemoryDedupStore(clock)
    tasks = delay_path(clock, sink, store)
    a = processor_for(Plain(times=1), clock, sink, store, tasks, consumer="consumer-a")
    b_handler = Plain(times=0)
    b = processor_for(b_handler, clock, sink, store, tasks, consumer="consumer-b")
    assert b.process(plain()) == "processed"
    assert a.process(plain()) == "retry_scheduled"
    clock.advance(TWO_HOURS)
    tasks.run_due()
    [copy] = sink.on(FINAL)
    assert b.process(received(copy, "m2")) == "duplicate" and len(b_handler.runs) == 1
    assert a.process(received(copy, "m2")) == "processed"


def test_another_consumers_count_is_not_ours(clock: ManualClock, sink: RecordingSink) -> None:
    store = MemoryDedupStore(clock)
    tasks = delay_path(clock, sink, store)
    processor = processor_for(Plain(times=1), clock, sink, store, tasks, max_attempts=2)
    theirs = Message(
        b"payload",
        {"dedup_key": "k", attr.RETRY_ATTEMPT: "2", attr.RETRY_CONSUMER: "consumer-b"},
        message_id="m1",
    )
    assert processor.process(theirs) == "retry_scheduled"  # our first attempt, not the limit
    [task] = tasks.tasks.values()
    assert b'"retry_attempt":"2"' in task.body and b'"retry_consumer":"consumer-a"' in task.body


def test_plain_retry_later_is_poison_at_the_attempt_limit(
    clock: ManualClock, sink: RecordingSink
) -> None:
    store = MemoryDedupStore(clock)
    tasks = delay_path(clock, sink, store)
    handler = Plain(times=99, delay=timedelta(seconds=30))
    processor = processor_for(handler, clock, sink, store, tasks, max_attempts=3)
    outcomes = [processor.process(plain())]
    for attempt in (2, 3):
        clock.advance(timedelta(seconds=30))
        assert tasks.run_due() == [RelayOutcome.PUBLISHED]
        copy = sink.on(FINAL)[-1]
        assert copy.attributes["retry_attempt"] == str(attempt)
        outcomes.append(processor.process(received(copy, f"m{attempt}")))
    assert outcomes == ["retry_scheduled", "retry_scheduled", "dead_lettered"]
    [dead] = sink.on(DLQ)
    assert dead.attributes["error_reason"] == "retry_limit"
    assert tasks.tasks == {}  # nothing more scheduled
    # Recorded done: a redelivered copy does not start the count again.
    assert processor.process(received(sink.on(FINAL)[-1], "m3")) == "duplicate"
    assert len(handler.runs) == 3


def test_without_a_delay_path_retry_later_is_nacked_with_a_warning(
    clock: ManualClock, sink: RecordingSink, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryDedupStore(clock)
    handler = Plain(times=1)
    processor = processor_for(handler, clock, sink, store, tasks=None)
    with caplog.at_level(logging.WARNING), pytest.raises(RetryLater):
        processor.process(plain())  # never acked silently: the caller nacks
    assert any("cannot be honoured" in r.getMessage() for r in caplog.records)
    assert processor.process(plain()) == "processed"  # the claim was released
    assert len(handler.runs) == 2


def test_a_retry_cloud_tasks_cannot_hold_is_dead_lettered_with_its_reason(
    clock: ManualClock, sink: RecordingSink
) -> None:
    store = MemoryDedupStore(clock)
    tasks = delay_path(clock, sink, store)
    processor = processor_for(Plain(delay=timedelta(days=400)), clock, sink, store, tasks)
    assert processor.process(plain()) == "dead_lettered"
    assert [m.attributes["error_reason"] for m in sink.on(DLQ)] == ["delay_too_long"]


def test_a_long_retry_hops_on_its_own_key_even_after_the_original_hopped(
    clock: ManualClock, sink: RecordingSink
) -> None:
    """Beyond Cloud Tasks' 30-day horizon the relay re-schedules (hops); the retry's hop record
    is its own, so a message whose first delivery hopped hops again on its retry."""
    store = MemoryDedupStore(clock)
    tasks = delay_path(clock, sink, store)
    far = timedelta(days=45)
    first = OutboundMessage(b"payload", {"dedup_key": "order-1"})
    tasks.schedule(first, clock.now() + far, "order-1")
    for outcome in (RelayOutcome.RESCHEDULED, RelayOutcome.PUBLISHED):
        clock.advance(timedelta(days=30))
        assert tasks.run_due() == [outcome]
    processor = processor_for(Plain(times=1, delay=far), clock, sink, store, tasks)
    asked = clock.now()
    assert processor.process(received(sink.on(FINAL)[0], "m1")) == "retry_scheduled"
    clock.advance(timedelta(days=30))
    assert tasks.run_due() == [RelayOutcome.RESCHEDULED]
    [hop] = tasks.tasks.values()
    assert hop.schedule_time == asked + far  # the second hop is due at the retry's time
    clock.advance(timedelta(days=15))
    assert tasks.run_due() == [RelayOutcome.PUBLISHED]
    assert sink.on(FINAL)[-1].attributes["retry_attempt"] == "2"
