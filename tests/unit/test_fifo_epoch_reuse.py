"""A number of an old sequence that another message took, met after the counter started again.

Another producer published a different message at a number the counter had given a
legitimate one (a hostile producer), and the group's counter then started again (a new epoch).
When the legitimate message reaches the gate only after that - delayed, say, by a relay whose
store was down - its number is behind the old sequence's end, but the record still holds the
key that ran there: it is the reused number's victim, dead-lettered ``fifo_sequence_reused``
with an ALERT, as it would be in the group's current sequence; never acked as a duplicate of a
message it is not (simulation seed 10205).
"""

from __future__ import annotations

import logging

import pytest

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.core.fifo_policy import GateOutcome, GatePolicy
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.producer.publisher import Publisher
from pubsub_toolkit.stores.counters.memory import MemorySequenceCounter
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.support.sinks import RecordingSink

ORIGIN = "projects/p/topics/origin"
DLQ = "projects/p/topics/dlq"


def _as_delivered(sink: RecordingSink, index: int) -> tuple[Message, int]:
    out = sink.on(ORIGIN)[index]
    message = Message(out.data, dict(out.attributes), message_id=f"m{index}")
    return message, int(out.attributes["fifo_seq"])


def test_a_late_message_of_the_old_sequence_whose_number_another_took_is_dead_lettered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink, dead_letters, handled = RecordingSink(), RecordingSink(), list[str]()
    log = DecisionLog("consumer-a")
    gate = FifoGate(
        MemoryFifoStore(),
        consumer="consumer-a",
        handler=lambda m: handled.append(m.attributes["dedup_key"]),
        dead_letters=DeadLetterer(dead_letters, DLQ, log),
        policy=GatePolicy(),
        clock=ManualClock(),
        log=log,
    )
    old = Publisher(sink, ORIGIN, counter=MemorySequenceCounter())
    for key in ("a", "b", "c"):  # c is #3, delayed: it reaches the gate last
        old.publish(key.encode(), fifo_group="g", dedup_key=key)
    for index in (0, 1):
        message, seq = _as_delivered(sink, index)
        assert gate.deliver(message, "g", seq).outcome is GateOutcome.PROCESSED
    # Another producer takes #3 (no epoch: not the Publisher's), and it runs there.
    hostile = Message(b"h", {"dedup_key": "h", "fifo_group": "g", "fifo_seq": "3"}, "mh")
    assert gate.deliver(hostile, "g", 3).outcome is GateOutcome.PROCESSED
    # The counter starts again (a new epoch): the group's sequence does too.
    Publisher(sink, ORIGIN, counter=MemorySequenceCounter()).publish(
        b"n", fifo_group="g", dedup_key="n"
    )
    message, seq = _as_delivered(sink, 3)
    assert gate.deliver(message, "g", seq).outcome is GateOutcome.PROCESSED

    late, seq = _as_delivered(sink, 2)
    with caplog.at_level(logging.INFO):
        assert gate.deliver(late, "g", seq).outcome is GateOutcome.DEAD_LETTERED
    assert any("ALERT" in r.getMessage() for r in caplog.records)
    assert [
        (m.attributes["dedup_key"], m.attributes["error_reason"]) for m in dead_letters.on(DLQ)
    ] == [("c", "fifo_sequence_reused")]
    # A redelivery of what did run at an old number stays a duplicate.
    message, seq = _as_delivered(sink, 1)
    assert gate.deliver(message, "g", seq).outcome is GateOutcome.DUPLICATE
    assert handled == ["a", "b", "h", "n"]
    assert len(dead_letters.on(DLQ)) == 1
