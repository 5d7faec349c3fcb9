"""A fingerprint mismatch at another FIFO number than its key's first copy: the number is filled.

A producer that reuses a dedup key across groups (key = an order id, group = a customer) sent
``order-7`` as A#1 and then, with other content, as B#1. Ingress dead-lettered B#1
(``fingerprint_mismatch``) but forwarded nothing for the number, so group B waited for its #1
for ever - B#2 never ran (gap policy ``wait``, the default), and the same for a reused key at a
later number of its own group. Seen on the local stack (/tmp/tc/s7_key_across_groups.py).
Only the first copy's own number is left to it: filling that could overtake the first copy.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.core.ingress import IngressOutcome
from pubsub_toolkit.ingress.pipeline import Ingress
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.support.sinks import RecordingSink

FINAL, DLQ = "projects/p/topics/final", "projects/p/topics/dlq"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


@pytest.fixture
def ingress(sink: RecordingSink, clock: ManualClock) -> Ingress:
    return Ingress(
        store=MemoryDedupStore(clock),
        sink=sink,
        final_topic=FINAL,
        dead_letter_topic=DLQ,
        lease=timedelta(seconds=30),
        ttl=timedelta(days=8),
        clock=clock,
    )


def fifo(key: str, group: str, seq: int, data: bytes, message_id: str) -> Message:
    attributes = {"fifo_group": group, "fifo_seq": str(seq), "dedup_key": key}
    return Message(data, attributes, message_id=message_id)


def fillers(sink: RecordingSink) -> list[tuple[str, str, str]]:
    return [
        (m.attributes["fifo_group"], m.attributes["fifo_seq"], m.attributes[attr.FIFO_FILLER])
        for m in sink.on(FINAL)
        if attr.FIFO_FILLER in m.attributes
    ]


@pytest.mark.parametrize(
    ("group", "seq"), [("B", 1), ("A", 2)], ids=["another group", "another number"]
)
def test_a_mismatch_at_another_number_is_dead_lettered_and_its_number_filled(
    ingress: Ingress, sink: RecordingSink, clock: ManualClock, group: str, seq: int
) -> None:
    assert ingress.handle(fifo("order-7", "A", 1, b"A1", "m1")).outcome is IngressOutcome.PUBLISHED
    impostor = fifo("order-7", group, seq, b"other", "m2")
    for _ in range(2):  # redelivered: still one dead letter, one filler
        assert ingress.handle(impostor).outcome is IngressOutcome.DEAD_LETTERED
    [dead] = sink.on(DLQ)
    assert dead.attributes["error_reason"] == attr.REASON_FINGERPRINT_MISMATCH
    assert fillers(sink) == [(group, str(seq), "dead_lettered:fingerprint_mismatch")]
    # ... so the group runs on past the number.
    ingress.handle(fifo("order-8", group, seq + 1, b"next", "m3"))
    handled: list[tuple[str, str]] = []
    gate = FifoGate(
        MemoryFifoStore(),
        consumer="c",
        handler=lambda m: handled.append((m.attributes["fifo_group"], m.attributes["fifo_seq"])),
        clock=clock,
    )
    for m in reversed(sink.on(FINAL)):  # the worst order
        group_, seq_ = m.attributes["fifo_group"], int(m.attributes["fifo_seq"])
        gate.deliver(Message(m.data, m.attributes), group_, seq_)
    assert sorted(handled) == sorted([("A", "1"), (group, str(seq + 1))])


def test_a_mismatch_at_the_first_copys_own_number_leaves_it_to_the_first_copy(
    ingress: Ingress, sink: RecordingSink
) -> None:
    ingress.handle(fifo("order-7", "A", 1, b"A1", "m1"))
    assert ingress.handle(fifo("order-7", "A", 1, b"other", "m2")).outcome is (
        IngressOutcome.DEAD_LETTERED
    )
    assert fillers(sink) == []


def test_a_mismatch_of_a_plain_first_copy_fills_the_impostors_number(
    ingress: Ingress, sink: RecordingSink
) -> None:
    ingress.handle(Message(b"plain", {"dedup_key": "order-7"}, message_id="m1"))
    ingress.handle(fifo("order-7", "B", 1, b"other", "m2"))
    assert fillers(sink) == [("B", "1", "dead_lettered:fingerprint_mismatch")]
