"""A refused repair never unparks a copy that another repair lists meanwhile.

A store-loss repair parks again the copies it still has, and when its save is refused (the
record moved meanwhile) it unparks those the record does not list - strays otherwise. But the
record it read to decide that is already old when it unparks: another repair (another thread
of the process, or another process) may list the very number in between, after parking its
own copy of the message - which the store did not take, keeping the first copy of a number.
Unparked then, the number stays listed with no copy stored, and the message - acked when it
was parked - is lost: a process without a copy of its own finds it ``parked_lost``, and a
sequence that starts again settles the number without dead-lettering anything (simulation
seed 225487: two of a group's parked messages lost after a Redis restart).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.core.fifo_policy import GateOutcome
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.support.sinks import RecordingSink
from tests.unit.test_fifo_gate import DLQ, Recorder, keyed, make_gate


class KeyRecorder(Recorder):
    """Records the dedup key that ran at each number, too."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: list[str] = []

    def __call__(self, message: Any) -> None:
        super().__call__(message)
        self.keys.append(message.attributes["dedup_key"])


class Meanwhile(MemoryFifoStore):
    """A memory store that runs a step (once) just before the next save, or the next read of
    a parked copy: what another worker does while this one waits for the store."""

    on_save: Callable[[], object] | None = None
    on_parked_read: Callable[[], object] | None = None

    def save(self, *args: Any) -> Any:
        step, self.on_save = self.on_save, None
        if step is not None:
            step()
        return super().save(*args)

    def parked_message(self, *args: Any) -> Message | None:
        step, self.on_parked_read = self.on_parked_read, None
        if step is not None:
            step()
        return super().parked_message(*args)


def test_a_refused_repair_leaves_the_copy_another_repair_listed_meanwhile() -> None:
    store, clock, sink = Meanwhile(), ManualClock(), RecordingSink()
    this = make_gate(Recorder(), clock, sink, store)
    other = make_gate(Recorder(), clock, sink, store)
    assert this.deliver(keyed("g", 1, "k1"), "g", 1).outcome is GateOutcome.PROCESSED
    states, parked = dict(store._states), dict(store._parked)
    three = keyed("g", 3, "k3")
    assert this.deliver(three, "g", 3).outcome is GateOutcome.PARKED
    store._states, store._parked = states, parked  # the store lost the park of #3

    def other_parks_four() -> None:
        # The record moves, so this process's repair save (under way) is refused...
        assert other.deliver(keyed("g", 4, "k4"), "g", 4).outcome is GateOutcome.PARKED
        store.on_parked_read = other_lists_three  # ...and then, as it checks #3's copy:

    def other_lists_three() -> None:
        # #3's redelivery parks there: the store keeps the repair's copy (the same message)
        # and the record lists #3 again.
        assert other.deliver(keyed("g", 3, "k3"), "g", 3).outcome is GateOutcome.PARKED

    store.on_save = other_parks_four
    this.sweep("g")  # finds #3 lost, parks it again, its save is refused: it looks again
    assert 3 in store.load("consumer-a", "g").parked
    assert store.parked_message("consumer-a", "g", 3) == three  # before: listed, not stored

    # A process with no copy of its own runs the group on from the store: nothing is lost.
    handler = KeyRecorder()
    restarted = make_gate(handler, clock, sink, store)
    assert restarted.deliver(keyed("g", 2, "k2"), "g", 2).outcome is GateOutcome.PROCESSED
    assert handler.keys == ["k2", "k3", "k4"]
    assert sink.on(DLQ) == []
