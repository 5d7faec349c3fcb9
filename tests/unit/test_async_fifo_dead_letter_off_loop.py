"""The asyncio gate's dead-letter publish runs off the event loop (issue 26).

A ``DeadLetterer`` publishes through a blocking client; run on the loop's thread, one publish
stalls every other delivery the loop holds. The asyncio gate performs the core's ``DeadLetter``
effect in a worker thread - for its own operations, and for the asyncio message processor that
calls it - so the sink sees a thread other than the loop's.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.consumer.gate_async import AsyncFifoGate
from pubsub_toolkit.consumer.processor_async import AsyncMessageProcessor
from pubsub_toolkit.core.fifo_policy import REASON_SEQUENCE_REUSED, GateOutcome
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.dedup.idempotent_async import AsyncIdempotentProcessor
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.producer.sink import OutboundMessage
from pubsub_toolkit.stores.dedup.memory import AsyncMemoryDedupStore
from pubsub_toolkit.stores.fifo_state.memory import AsyncMemoryFifoStore

DLQ = "dead-letters"


class ThreadRecordingSink:
    """A sink that records the thread each publish ran on."""

    def __init__(self) -> None:
        self.threads: list[int] = []
        self.reasons: list[str] = []

    def publish(self, topic: str, message: OutboundMessage) -> str:
        self.threads.append(threading.get_ident())
        self.reasons.append(message.attributes.get(attr.ERROR_REASON, ""))
        return f"dl-{len(self.threads)}"


def message(seq: int, key: str) -> Message:
    attributes = {"dedup_key": key, "fifo_group": "g", "fifo_seq": str(seq)}
    return Message(b"x", attributes, message_id=f"{key}-{seq}")


async def handler(message: Message) -> None:
    await asyncio.sleep(0)


def gate_over(sink: ThreadRecordingSink) -> AsyncFifoGate:
    log = DecisionLog("c")
    return AsyncFifoGate(
        AsyncMemoryFifoStore(),
        consumer="c",
        handler=handler,
        dead_letters=DeadLetterer(sink, DLQ, log),
        log=log,
    )


def test_the_gates_own_dead_letter_publish_runs_off_the_loop() -> None:
    sink = ThreadRecordingSink()

    async def main() -> int:
        gate = gate_over(sink)
        assert (await gate.deliver(message(1, "k1"), "g", 1)).outcome is GateOutcome.PROCESSED
        # Another message at a number already taken: kept on the dead-letter topic.
        result = await gate.deliver(message(1, "other"), "g", 1)
        assert result.outcome is GateOutcome.DEAD_LETTERED
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    assert sink.reasons == [REASON_SEQUENCE_REUSED]
    assert sink.threads[0] != loop_thread


def test_the_processors_dead_letter_publish_through_the_gate_runs_off_the_loop() -> None:
    sink = ThreadRecordingSink()

    async def main() -> int:
        gate = gate_over(sink)
        dedup = AsyncIdempotentProcessor(
            AsyncMemoryDedupStore(), namespace="c", lease=timedelta(seconds=30), ttl=timedelta(1)
        )
        processor = AsyncMessageProcessor(handler=handler, dedup=dedup, gate=gate)
        await processor.process(message(1, "k1"))
        await processor.process(message(1, "other"))  # a reused number, once per copy
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    assert len(sink.threads) == 1, sink.reasons
    assert sink.threads[0] != loop_thread
    assert sink.reasons == [REASON_SEQUENCE_REUSED]
