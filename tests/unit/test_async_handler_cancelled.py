"""An ``async def`` handler that raises ``asyncio.CancelledError`` although nobody cancelled
its task - it awaited a task or future that something else cancelled - is a handler failure,
not the consumer going away.

Before, the error went through the gate and the processor as "the task is going away": the
message was neither acked nor nacked, so the streaming client kept it leased (up to an hour)
and its FIFO group waited behind it, the successors parked (found as a new user on the
emulator: a group of 6 stopped at #2 for as long as the consumer ran). A real cancellation of
the task still goes through untouched."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import pytest

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate_async import AsyncFifoGate
from pubsub_toolkit.consumer.processor_async import AsyncMessageProcessor
from pubsub_toolkit.dedup.idempotent_async import AsyncIdempotentProcessor
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.dedup.memory import AsyncMemoryDedupStore
from pubsub_toolkit.stores.fifo_state.memory import AsyncMemoryFifoStore

GROUP = "order-7"


def fifo(seq: int) -> Message:
    return Message(
        f"step {seq}".encode(),
        {attr.FIFO_GROUP: GROUP, attr.FIFO_SEQ: str(seq), attr.DEDUP_KEY: f"k{seq}"},
        message_id=f"m{seq}",
    )


def processor_for(
    handler: Callable[[Message], Awaitable[None]], clock: ManualClock
) -> AsyncMessageProcessor:
    gate = AsyncFifoGate(
        AsyncMemoryFifoStore(clock),
        consumer="orders",
        handler=handler,
        clock=clock,
    )
    dedup = AsyncIdempotentProcessor(
        AsyncMemoryDedupStore(clock),
        namespace="orders",
        lease=timedelta(seconds=60),
        ttl=timedelta(days=1),
        clock=clock,
    )
    return AsyncMessageProcessor(handler=handler, dedup=dedup, gate=gate, clock=clock)


class CancelledOnce:
    """A handler whose first call awaits a task that was cancelled."""

    def __init__(self) -> None:
        self.calls = 0
        self.done: list[str] = []

    async def __call__(self, message: Message) -> None:
        self.calls += 1
        if self.calls == 1:
            other = asyncio.ensure_future(asyncio.sleep(3600))
            other.cancel()
            await other  # raises CancelledError into a task nobody cancelled
        self.done.append(message.dedup_key)


def test_a_fifo_handlers_own_cancelled_error_is_a_failure_and_the_group_goes_on() -> None:
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
    handler = CancelledOnce()
    processor = processor_for(handler, clock)

    async def main() -> None:
        with pytest.raises(Exception) as failed:  # a counted failure: the consumer nacks it
            await processor.process(fifo(1))
        assert not isinstance(failed.value, asyncio.CancelledError)
        await processor.process(fifo(2))  # parked behind #1
        clock.advance(timedelta(minutes=10))  # past the retry backoff
        await processor.gate.sweep(GROUP)  # the sweeper runs #1, then #2

    asyncio.run(main())
    assert handler.done == ["k1", "k2"]  # #1 once, then #2: in order, nothing lost


def test_a_plain_messages_handler_cancelled_error_is_a_failure_redelivered() -> None:
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
    handler = CancelledOnce()
    processor = processor_for(handler, clock)
    plain = Message(b"hello", {attr.DEDUP_KEY: "p1"}, message_id="p1")

    async def main() -> str:
        with pytest.raises(Exception) as failed:  # an Exception: the consumer nacks it
            await processor.process(plain)
        assert not isinstance(failed.value, asyncio.CancelledError)
        return await processor.process(plain)  # the redelivery runs it, once

    assert asyncio.run(main()) == "processed"
    assert handler.done == ["p1"]


def test_a_really_cancelled_task_is_still_cancelled() -> None:
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))

    async def main() -> bool:
        running = asyncio.Event()

        async def slow(message: Message) -> None:
            running.set()
            await asyncio.sleep(3600)

        processor = processor_for(slow, clock)
        task = asyncio.create_task(processor.process(fifo(1)))
        await running.wait()
        task.cancel()  # the consumer going away
        try:
            await task
        except asyncio.CancelledError:
            return True
        return False

    assert asyncio.run(main())
