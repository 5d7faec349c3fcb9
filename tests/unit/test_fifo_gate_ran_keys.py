"""A producer's retry renumbered more than 64 numbers after its first copy, reaching the gate
as a new message because the store lost ingress's record of its key, does not run a second
time on a gate process that saw the first copy run (simulation seeds 397 of ``--enable
renumber_far`` and 872 of ``--enable renumber_far,long_pause,store_restart_empty``: the same
process ran the key twice). The state keeps only the last 64 keys; the process remembers more."""

from __future__ import annotations

import pytest

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.core.fifo_policy import GateOutcome
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.producer.publisher import Publisher
from pubsub_toolkit.stores.counters.memory import MemorySequenceCounter
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.support.sinks import RecordingSink

ORIGIN = "projects/p/topics/origin"
DLQ = "projects/p/topics/dlq"
FAR = 70  # numbers between the first copy and the retry: more than the state's 64 keys


@pytest.mark.parametrize("store_lost_the_group", [False, True])
@pytest.mark.parametrize("batch", [1, 3])
def test_a_retry_renumbered_far_away_does_not_run_twice_on_the_process_that_ran_it(
    store_lost_the_group: bool, batch: int
) -> None:
    store, log = MemoryFifoStore(), DecisionLog("consumer-a")
    handled: list[str] = []

    def handle(messages: Message | list[Message]) -> None:
        for m in messages if isinstance(messages, list) else [messages]:
            handled.append(m.attributes["dedup_key"])

    gate = FifoGate(
        store,
        consumer="consumer-a",
        handler=handle,
        dead_letters=DeadLetterer(RecordingSink(), DLQ, log),
        clock=ManualClock(),
        log=log,
        batch=batch,
    )
    sink, counter = RecordingSink(), MemorySequenceCounter()
    publisher = Publisher(sink, ORIGIN, counter=counter)
    publisher.publish(b"k", fifo_group="g", dedup_key="k")
    for n in range(FAR):
        publisher.publish(b"x", fifo_group="g", dedup_key=f"x{n}")
    if store_lost_the_group:
        # Redis restarted empty: the group's record and its counter are gone (a new epoch).
        store._states.clear()
        store._parked.clear()
        counter = MemorySequenceCounter()
    publisher = Publisher(sink, ORIGIN, counter=counter)  # another producer process
    publisher.publish(b"k", fifo_group="g", dedup_key="k")  # its retry, from another producer
    published = sink.on(ORIGIN)
    for out in published[:-1]:
        message = Message(out.data, dict(out.attributes), message_id=out.attributes["dedup_key"])
        gate.deliver(message, "g", int(out.attributes["fifo_seq"]))
    retry = published[-1]
    copy = Message(retry.data, dict(retry.attributes), message_id="retry")
    if batch > 1:  # the retry and the number after it handed over together
        publisher.publish(b"y", fifo_group="g", dedup_key="y")
        after = sink.on(ORIGIN)[-1]
        results = gate.deliver_batch(
            "g",
            [
                (copy, int(retry.attributes["fifo_seq"])),
                (
                    Message(after.data, dict(after.attributes), message_id="y"),
                    1 + int(retry.attributes["fifo_seq"]),
                ),
            ],
        )
        assert [getattr(r, "outcome", r) for r in results] == [
            GateOutcome.FILLED,
            GateOutcome.PROCESSED,
        ]
    else:
        assert gate.deliver(copy, "g", int(retry.attributes["fifo_seq"])).outcome is (
            GateOutcome.FILLED
        )
    assert handled.count("k") == 1


def test_another_message_at_a_number_further_back_than_the_states_keys_is_not_a_duplicate() -> None:
    """A producer reuses #1 with another message once the group is 70 numbers on (seeds 36 of
    ``--enable renumber_far`` and 541 of ``--enable renumber_far,long_pause,
    store_restart_empty``): the state no longer records #1's key, but this process saw what ran
    there - the newcomer is dead-lettered ``fifo_sequence_reused``, not acked as a redelivery
    (lost silently); a real redelivery of #1 is still a duplicate."""
    store, log, dead_letters = MemoryFifoStore(), DecisionLog("consumer-a"), RecordingSink()
    handled: list[str] = []
    gate = FifoGate(
        store,
        consumer="consumer-a",
        handler=lambda m: handled.append(m.attributes["dedup_key"]),
        dead_letters=DeadLetterer(dead_letters, DLQ, log),
        clock=ManualClock(),
        log=log,
    )
    sink = RecordingSink()
    publisher = Publisher(sink, ORIGIN, counter=MemorySequenceCounter())
    for n in range(FAR + 1):
        publisher.publish(b"x", fifo_group="g", dedup_key=f"x{n}")
    for out in sink.on(ORIGIN):
        message = Message(out.data, dict(out.attributes), message_id=out.attributes["dedup_key"])
        gate.deliver(message, "g", int(out.attributes["fifo_seq"]))
    first = sink.on(ORIGIN)[0]
    again = Message(first.data, dict(first.attributes), message_id="x0")
    assert gate.deliver(again, "g", 1).outcome is GateOutcome.DUPLICATE
    impostor = Message(b"h", {**first.attributes, "dedup_key": "h"}, message_id="h")
    assert gate.deliver(impostor, "g", 1).outcome is GateOutcome.DEAD_LETTERED
    assert [m.attributes["error_reason"] for m in dead_letters.on(DLQ)] == ["fifo_sequence_reused"]
    assert "h" not in handled
