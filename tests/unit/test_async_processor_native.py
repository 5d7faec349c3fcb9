"""``AsyncMessageProcessor`` drives the processor's protocol (:mod:`pubsub_toolkit.core.process`)
on asyncio itself (issue 26): every effect awaited in the caller's task, the blocking ones - a
RetryLater's Cloud Tasks re-schedule, a dead-letter publish - in a worker thread, and no greenlet.

Before, it ran the sync processor in a greenlet on the loop: the re-schedule was a blocking call
on the loop's thread, stalling every other delivery the loop held."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
from datetime import UTC, datetime, timedelta

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate_async import AsyncFifoGate
from pubsub_toolkit.consumer.processor_async import AsyncMessageProcessor
from pubsub_toolkit.consumer.retry import RETRY_SCHEDULED
from pubsub_toolkit.dedup.idempotent_async import AsyncIdempotentProcessor
from pubsub_toolkit.errors import RetryLater
from pubsub_toolkit.message import Message, OutboundMessage
from pubsub_toolkit.stores.dedup.memory import AsyncMemoryDedupStore
from pubsub_toolkit.stores.fifo_state.memory import AsyncMemoryFifoStore

# Only a stalled loop gets near this: the scheduler waits for a coroutine on the loop.
STALLED = 30.0


class WaitsForTheLoop:
    """A scheduler whose ``schedule`` returns only once another coroutine on the loop ran."""

    def __init__(self) -> None:
        self.loop_ran = threading.Event()
        self.scheduled: list[tuple[OutboundMessage, datetime, str]] = []
        self.threads: list[int] = []
        self.in_time: list[bool] = []  # whether the loop ran while schedule() waited

    def schedule(
        self, message: OutboundMessage, deliver_at: datetime, dedup_key: str, hop: int = 0
    ) -> str:
        self.threads.append(threading.get_ident())
        # On the loop's own thread this waits out STALLED: nothing else can run to set it.
        self.in_time.append(self.loop_ran.wait(STALLED))
        self.scheduled.append((message, deliver_at, dedup_key))
        return "task-1"


async def retry_later(message: Message) -> None:
    raise RetryLater(timedelta(minutes=5), "the stock service is down")


def processor_with(scheduler: WaitsForTheLoop, clock: ManualClock) -> AsyncMessageProcessor:
    gate = AsyncFifoGate(
        AsyncMemoryFifoStore(), consumer="orders", handler=retry_later, clock=clock
    )
    dedup = AsyncIdempotentProcessor(
        AsyncMemoryDedupStore(clock),
        namespace="orders",
        lease=timedelta(seconds=60),
        ttl=timedelta(days=1),
        clock=clock,
    )
    return AsyncMessageProcessor(
        handler=retry_later, dedup=dedup, gate=gate, scheduler=scheduler, clock=clock
    )


def test_a_retry_later_reschedule_does_not_block_the_event_loop() -> None:
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
    scheduler = WaitsForTheLoop()
    processor = processor_with(scheduler, clock)

    async def another_delivery() -> None:
        await asyncio.sleep(0)  # runs only while the loop is free
        scheduler.loop_ran.set()

    async def main() -> tuple[str, int]:
        message = Message(b"order", {attr.DEDUP_KEY: "k1"}, message_id="m1")
        other = asyncio.create_task(another_delivery())
        outcome = await processor.process(message)
        await other
        return outcome, threading.get_ident()

    outcome, loop_thread = asyncio.run(main())
    assert outcome == RETRY_SCHEDULED
    assert scheduler.in_time == [True]
    assert scheduler.threads and scheduler.threads[0] != loop_thread
    [(copy, due, key)] = scheduler.scheduled
    assert key == "k1" and due == clock.now() + timedelta(minutes=5)
    assert copy.attributes[attr.RETRY_ATTEMPT] == "2"


def test_the_async_message_processor_runs_without_greenlet_installed() -> None:
    # A fresh interpreter where importing greenlet fails, as without the ``asyncio`` extra:
    # a plain message (dedup), a FIFO group's message (the gate) and a dead letter.
    script = textwrap.dedent(
        """
        import asyncio, sys
        from datetime import timedelta
        sys.modules["greenlet"] = None  # import greenlet -> ImportError
        from pubsub_toolkit.consumer.gate_async import AsyncFifoGate
        from pubsub_toolkit.consumer.processor_async import AsyncMessageProcessor
        from pubsub_toolkit.dead_letters.send import DeadLetterer
        from pubsub_toolkit.dedup.idempotent_async import AsyncIdempotentProcessor
        from pubsub_toolkit.errors import PermanentError
        from pubsub_toolkit.message import Message
        from pubsub_toolkit.observability import DecisionLog
        from pubsub_toolkit.stores.dedup.memory import AsyncMemoryDedupStore
        from pubsub_toolkit.stores.fifo_state.memory import AsyncMemoryFifoStore

        class Sink:
            def publish(self, topic, message):
                return "dl-1"

        async def handler(message):
            await asyncio.sleep(0)

        log = DecisionLog("c")
        dead_letters = DeadLetterer(Sink(), "dlq", log)
        gate = AsyncFifoGate(AsyncMemoryFifoStore(), consumer="c", handler=handler,
                             dead_letters=dead_letters, log=log)
        dedup = AsyncIdempotentProcessor(
            AsyncMemoryDedupStore(), namespace="c", lease=timedelta(seconds=5), ttl=timedelta(1)
        )
        processor = AsyncMessageProcessor(
            handler=handler, dedup=dedup, gate=gate, dead_letters=dead_letters
        )

        async def main():
            plain = Message(b"x", {"dedup_key": "k"}, message_id="m1")
            grouped = Message(b"y", {"dedup_key": "g1", "fifo_group": "g", "fifo_seq": "1"},
                              message_id="m2")
            return [
                await processor.process(plain),
                await processor.process(plain),
                await processor.process(grouped),
                await processor.reject(plain, PermanentError("invalid_payload", "no")),
            ]

        print(*asyncio.run(main()))
        print("greenlet" in sys.modules and sys.modules["greenlet"] is not None)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["processed", "duplicate", "processed", "dead_lettered", "False"]
