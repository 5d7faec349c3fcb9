"""A plain message the consumer dead-lettered runs again when `dlq replay` brings it back.

operate.md: "Fix the cause first - ... the handler (poison) - then replay." A handler's
``PermanentError`` (or ``RetryLater`` at its limit) records the key done, so that a redelivery
is not dead-lettered twice; the replay arrives with the same ``dedup_key`` (plus
``replay_id``), and was acked as a duplicate of that record: the handler never ran, the letter
was gone from the dead-letter topic, the message was lost.

Found trying the local stack as a new user: ``dlq replay --id`` of a ``PermanentError`` letter
answered "replayed 1", the replay reached the final topic, and the consumer dropped it.

What must hold: a replay of a key dead-lettered *here* runs once (two letters of one
dead-lettering, replayed, run once); a replay that fails again is dead-lettered again and a
later replay runs; a plain redelivery stays a duplicate; and a replay of a message that did run
stays a duplicate (operate.md: its replay "reaches the consumer as a duplicate").
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.consumer.gate_async import AsyncFifoGate
from pubsub_toolkit.consumer.processor import MessageProcessor
from pubsub_toolkit.consumer.processor_async import AsyncMessageProcessor
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor
from pubsub_toolkit.dedup.idempotent_async import AsyncIdempotentProcessor
from pubsub_toolkit.errors import PermanentError
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.stores.dedup.memory import AsyncMemoryDedupStore, MemoryDedupStore
from pubsub_toolkit.stores.fifo_state.memory import AsyncMemoryFifoStore, MemoryFifoStore
from tests.support.sinks import RecordingSink

DLQ = "projects/p/topics/dlq"


class Handler:
    """Refuses every message until ``fixed``; then returns ``ok``."""

    def __init__(self) -> None:
        self.fixed = False
        self.runs = 0
        self.done = 0

    def __call__(self, message: Message) -> str:
        self.runs += 1
        if not self.fixed:
            raise PermanentError("bad_order", "order 42 has no customer")
        self.done += 1
        return "ok"


def original() -> Message:
    return Message(b"payload", {"dedup_key": "order-42"}, message_id="m1")


def replayed(replay_id: str, message_id: str) -> Message:
    """What `dlq replay` publishes and ingress forwards: the original plus ``replay_id``."""
    return Message(
        b"payload", {"dedup_key": "order-42", "replay_id": replay_id}, message_id=message_id
    )


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime(2030, 1, 1, tzinfo=UTC))


def sync_processor(handler: Handler, clock: ManualClock, sink: RecordingSink) -> MessageProcessor:
    dedup = IdempotentProcessor(
        MemoryDedupStore(clock),
        namespace="billing",
        lease=timedelta(minutes=1),
        ttl=timedelta(days=8),
        clock=clock,
    )
    gate = FifoGate(MemoryFifoStore(), consumer="billing", handler=handler, clock=clock)
    return MessageProcessor(
        handler=handler,
        dedup=dedup,
        gate=gate,
        dead_letters=DeadLetterer(sink, DLQ, DecisionLog("billing")),
        clock=clock,
    )


def test_a_replay_of_a_message_dead_lettered_here_runs_once_the_handler_is_fixed(
    clock: ManualClock,
) -> None:
    sink, handler = RecordingSink(), Handler()
    processor = sync_processor(handler, clock, sink)
    assert processor.process(original()) == "dead_lettered"
    assert processor.process(original()) == "duplicate"  # a redelivery: not dead-lettered twice
    assert len(sink.on(DLQ)) == 1

    handler.fixed = True
    assert processor.process(replayed("dl-1", "m2")) == "processed"
    assert handler.done == 1
    # A second letter of the same dead-lettering (a dead-letter publish Pub/Sub duplicated),
    # replayed too, and a copy of the first replay: duplicates, the effect happened once.
    assert processor.process(replayed("dl-2", "m3")) == "duplicate"
    assert processor.process(replayed("dl-1", "m2")) == "duplicate"
    assert processor.process(original()) == "duplicate"
    assert handler.done == 1 and len(sink.on(DLQ)) == 1


def test_a_replay_that_fails_again_is_dead_lettered_and_the_next_replay_runs(
    clock: ManualClock,
) -> None:
    sink, handler = RecordingSink(), Handler()
    processor = sync_processor(handler, clock, sink)
    assert processor.process(original()) == "dead_lettered"
    assert processor.process(replayed("dl-1", "m2")) == "dead_lettered"  # not fixed yet
    assert processor.process(replayed("dl-1", "m2")) == "duplicate"  # its redelivery
    [_, again] = sink.on(DLQ)
    assert again.attributes["error_reason"] == "bad_order"
    assert again.attributes["replay_id"] == "dl-1"  # the next replay gets a new replay_id

    handler.fixed = True
    assert processor.process(replayed("dl-9", "m3")) == "processed"
    assert processor.process(replayed("dl-10", "m4")) == "duplicate"
    assert handler.done == 1 and handler.runs == 3


def test_a_replay_of_a_message_that_ran_stays_a_duplicate(clock: ManualClock) -> None:
    sink, handler = RecordingSink(), Handler()
    handler.fixed = True
    processor = sync_processor(handler, clock, sink)
    assert processor.process(original()) == "processed"
    # e.g. a copy Pub/Sub's own dead-letter policy forwarded after a lost ack, replayed
    assert processor.process(replayed("dl-1", "m2")) == "duplicate"
    assert handler.done == 1


def test_the_async_processor_runs_the_replay_too(clock: ManualClock) -> None:
    sink, refusing = RecordingSink(), Handler()

    async def handler(message: Message) -> str:
        return refusing(message)

    dedup = AsyncIdempotentProcessor(
        AsyncMemoryDedupStore(clock),
        namespace="billing",
        lease=timedelta(minutes=1),
        ttl=timedelta(days=8),
        clock=clock,
    )
    gate = AsyncFifoGate(AsyncMemoryFifoStore(), consumer="billing", handler=handler, clock=clock)
    processor = AsyncMessageProcessor(
        handler=handler,
        dedup=dedup,
        gate=gate,
        dead_letters=DeadLetterer(sink, DLQ, DecisionLog("billing")),
        clock=clock,
    )

    async def scenario() -> list[str]:
        outcomes = [await processor.process(original())]
        refusing.fixed = True
        outcomes.append(await processor.process(replayed("dl-1", "m2")))
        outcomes.append(await processor.process(replayed("dl-2", "m3")))
        return outcomes

    assert asyncio.run(scenario()) == ["dead_lettered", "processed", "duplicate"]
    assert refusing.done == 1


def test_a_replayed_reused_key_is_dead_lettered_again_not_dropped(clock: ManualClock) -> None:
    """A key reused with other content is dead-lettered once per copy (``fingerprint_mismatch``);
    a replay of that letter still cannot run, and was acked without a new letter - gone. It
    leaves a new one, once however often that replay is redelivered (as ingress does)."""
    sink, handler = RecordingSink(), Handler()
    handler.fixed = True
    processor = sync_processor(handler, clock, sink)
    assert processor.process(original()) == "processed"
    other = {"dedup_key": "order-42"}
    assert processor.process(Message(b"other", other, message_id="m2")) == "dead_lettered"
    assert processor.process(Message(b"other", other, message_id="m2")) == "dead_lettered"
    assert len(sink.on(DLQ)) == 1
    replay = Message(b"other", {**other, "replay_id": "dl-1"}, message_id="m3")
    assert processor.process(replay) == "dead_lettered"
    assert processor.process(replay) == "dead_lettered"
    [_, again] = sink.on(DLQ)
    assert again.attributes["error_reason"] == "fingerprint_mismatch"
    assert handler.done == 1


def test_a_replayed_late_fifo_arrival_is_dead_lettered_again_not_dropped(
    clock: ManualClock,
) -> None:
    """A `dlq replay` of a ``fifo_late_after_skip`` letter (e.g. without ``--consumer-id``, so
    the CLI could not see that this consumer had moved past it) cannot run either: it must leave
    a new letter. It was acked without one - gone from the dead-letter topic. Redeliveries of
    one copy, and of one replay, still leave one letter each."""
    sink, handler = RecordingSink(), Handler()
    handler.fixed = True
    log = DecisionLog("billing")
    dead_letters = DeadLetterer(sink, DLQ, log)
    dedup = IdempotentProcessor(
        MemoryDedupStore(clock),
        namespace="billing",
        lease=timedelta(minutes=1),
        ttl=timedelta(days=8),
        clock=clock,
    )
    gate = FifoGate(
        MemoryFifoStore(),
        consumer="billing",
        handler=handler,
        dead_letters=dead_letters,
        clock=clock,
        log=log,
    )
    processor = MessageProcessor(
        handler=handler, dedup=dedup, gate=gate, dead_letters=dead_letters, clock=clock
    )

    def step(seq: int, message_id: str, **extra: str) -> Message:
        attributes = {"dedup_key": f"k{seq}", "fifo_group": "g", "fifo_seq": str(seq)}
        return Message(b"x%d" % seq, {**attributes, **extra}, message_id=message_id)

    gate.skip("g", 1, run=False)
    assert processor.process(step(2, "m2")) == "processed"
    assert processor.process(step(1, "m1")) == "dead_lettered"
    assert processor.process(step(1, "m1")) == "dead_lettered"
    assert len(sink.on(DLQ)) == 1
    replay = step(1, "m3", replay_id="dl-1")
    assert processor.process(replay) == "dead_lettered"
    assert processor.process(replay) == "dead_lettered"
    reasons = [m.attributes["error_reason"] for m in sink.on(DLQ)]
    assert reasons == ["fifo_late_after_skip"] * 2
    assert handler.done == 1  # #2 only
