"""A handler's ``PermanentError`` is dead-lettered and acked (docs/concepts/errors.md; the
package's docstring: "PermanentError (dead-letter, ack)"): outside FIFO groups with the error's
reason and detail, in a group as poison at once (``fifo_poison``, the error in the detail).

Found trying the library as a new user: ``@idempotent`` on a subscriber callback, the
``Consumer`` and both processors treated it as any other failure - the claim released, the
message nacked and redelivered for ever (a traceback per delivery), nothing dead-lettered; in a
FIFO group it was retried ``max_attempts`` times with backoff (about 75 s by default, the group
waiting) before it became poison.
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
from pubsub_toolkit.core.fifo_policy import GateOutcome, GatePolicy, PoisonPolicy
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


class Refuses:
    """A handler that can never process its message."""

    def __init__(self) -> None:
        self.runs = 0

    def __call__(self, message: Message) -> None:
        self.runs += 1
        raise PermanentError("bad_order", "order 42 has no customer")


def plain() -> Message:
    return Message(b"payload", {"dedup_key": "order-42"}, message_id="m1")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime(2030, 1, 1, tzinfo=UTC))


def sync_processor(
    handler: Refuses, clock: ManualClock, sink: RecordingSink, *, dead_letters: bool = True
) -> MessageProcessor:
    log = DecisionLog("billing")
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
        dead_letters=DeadLetterer(sink, DLQ, log) if dead_letters else None,
        clock=clock,
    )


def test_a_handlers_permanent_error_is_dead_lettered_with_its_reason_and_acked(
    clock: ManualClock,
) -> None:
    sink, handler = RecordingSink(), Refuses()
    processor = sync_processor(handler, clock, sink)
    assert processor.process(plain()) == "dead_lettered"  # acked, not raised (nacked)
    [dead] = sink.on(DLQ)
    assert dead.data == b"payload"
    assert dead.attributes["error_reason"] == "bad_order"
    assert dead.attributes["error_detail"] == "order 42 has no customer"
    # Recorded done: a redelivery neither runs the handler again nor dead-letters it twice.
    assert processor.process(plain()) == "duplicate"
    assert handler.runs == 1 and len(sink.on(DLQ)) == 1


def test_without_a_dead_letter_topic_a_permanent_error_is_still_redelivered(
    clock: ManualClock,
) -> None:
    sink, handler = RecordingSink(), Refuses()
    processor = sync_processor(handler, clock, sink, dead_letters=False)
    with pytest.raises(PermanentError):
        processor.process(plain())  # nothing acked silently: the caller nacks
    with pytest.raises(PermanentError):
        processor.process(plain())  # the claim was released: it runs again
    assert handler.runs == 2


def test_the_async_processor_dead_letters_it_the_same_way(clock: ManualClock) -> None:
    sink, refuses = RecordingSink(), Refuses()

    async def handler(message: Message) -> None:
        refuses(message)

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

    async def twice() -> list[str]:
        return [await processor.process(plain()), await processor.process(plain())]

    assert asyncio.run(twice()) == ["dead_lettered", "duplicate"]
    assert [m.attributes["error_reason"] for m in sink.on(DLQ)] == ["bad_order"]
    assert refuses.runs == 1


# --- in a FIFO group: poison at once, not after max_attempts backed-off retries ----------------


class RefusesFirst:
    """A FIFO handler that refuses number 1 and records the numbers it ran."""

    def __init__(self) -> None:
        self.seen: list[int] = []
        self.refused = 0

    def __call__(self, message: Message) -> None:
        seq = int(message.attributes["fifo_seq"])
        if seq == 1:
            self.refused += 1
            raise PermanentError("bad_order", "order 42 has no customer")
        self.seen.append(seq)


def fifo(seq: int) -> Message:
    return Message(b"x%d" % seq, {"fifo_group": "g", "fifo_seq": str(seq), "dedup_key": f"k{seq}"})


def test_in_a_fifo_group_a_permanent_error_is_poison_at_once(clock: ManualClock) -> None:
    sink, handler = RecordingSink(), RefusesFirst()
    log = DecisionLog("billing")
    store = MemoryFifoStore()
    gate = FifoGate(
        store,
        consumer="billing",
        handler=handler,
        dead_letters=DeadLetterer(sink, DLQ, log),
        policy=GatePolicy(max_attempts=5, poison=PoisonPolicy.SKIP),
        clock=clock,
        log=log,
    )
    assert gate.deliver(fifo(2), "g", 2).outcome is GateOutcome.PARKED
    # The first attempt, no backoff: dead-lettered now and the group goes on at once.
    assert gate.deliver(fifo(1), "g", 1).outcome is GateOutcome.DEAD_LETTERED
    assert handler.refused == 1 and handler.seen == [2]
    [dead] = sink.on(DLQ)
    assert dead.attributes["error_reason"] == "fifo_poison"  # the poison policy's tools apply
    assert "bad_order: order 42 has no customer" in dead.attributes["error_detail"]
    assert store.load("billing", "g").last_processed == 2


def test_the_async_gate_makes_it_poison_at_once_too(clock: ManualClock) -> None:
    sink, refuses = RecordingSink(), RefusesFirst()

    async def handler(message: Message) -> None:
        refuses(message)

    log = DecisionLog("billing")
    gate = AsyncFifoGate(
        AsyncMemoryFifoStore(),
        consumer="billing",
        handler=handler,
        dead_letters=DeadLetterer(sink, DLQ, log),
        policy=GatePolicy(max_attempts=5, poison=PoisonPolicy.BLOCK),
        clock=clock,
        log=log,
    )
    outcome = asyncio.run(gate.deliver(fifo(1), "g", 1)).outcome
    assert outcome is GateOutcome.DEAD_LETTERED  # blocked at #1, on the dead-letter topic
    assert [m.attributes["error_reason"] for m in sink.on(DLQ)] == ["fifo_poison"]
    assert refuses.refused == 1
