"""A dead letter is counted once by reason (``dead_lettered.{reason}``): what the
``pubsub_toolkit.dead_letters`` metric and the status page's "by reason" show."""

from __future__ import annotations

from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.message import Message, OutboundMessage
from pubsub_toolkit.observability import DecisionLog


class _Sink:
    def publish(self, topic: str, message: OutboundMessage) -> str:
        return "dead-letter-1"


def test_each_dead_letter_counts_once_by_reason() -> None:
    log = DecisionLog("consumer")
    letters = DeadLetterer(_Sink(), "projects/p/topics/dlq", log)
    for n in range(3):
        letters.send(
            Message(b"x", {}, message_id=f"m{n}"), "invalid_fifo_seq", "bad", dedup_key="k"
        )
    counts = log.metrics.snapshot()
    assert counts["dead_lettered"] == 3
    assert counts["dead_lettered.invalid_fifo_seq"] == 3
