"""``MessageProcessor.process_batch`` when a store loss is repaired while a batch's handler runs
(issue 24's 100,000-schedule run, ``process_batch`` with ``slow_handler``).

* Repaired by this very process (seed 90643): the repair keeps the batch's own live lease under
  a new token, so the batch's advance must go through - no ``lease_outlived`` ALERT, no rerun.
* Repaired by another process (seed 12956): that repair fences the batch's lease without
  running anything. The batch is fenced (an ALERT names each number, "it may run again
  elsewhere"); this process must not run the same numbers again at once, in the same call -
  ``deliver`` nacks a fenced number, and ``HeldLeases`` says a process never reruns its own run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.consumer.processor import MessageProcessor
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore


def _message(seq: int) -> Message:
    attributes = {"fifo_group": "g", "fifo_seq": str(seq), "dedup_key": f"k{seq}"}
    return Message(f"{seq}".encode(), attributes, message_id=f"m{seq}")


class LosesWrites(MemoryFifoStore):
    """A memory store that can be put back to an earlier snapshot (a failover losing writes)."""

    def snapshot(self) -> tuple[dict[Any, Any], dict[Any, Any]]:
        return dict(self._states), dict(self._parked)

    def restore(self, snapshot: tuple[dict[Any, Any], dict[Any, Any]]) -> None:
        self._states, self._parked = dict(snapshot[0]), dict(snapshot[1])


def _processor(
    store: MemoryFifoStore, clock: ManualClock, handler: Callable[[list[Message]], None]
) -> MessageProcessor:
    # batch mode: the handler takes a list
    gate = FifoGate(store, consumer="c", handler=handler, clock=clock, batch=10)  # type: ignore[arg-type]
    dedup = IdempotentProcessor(
        MemoryDedupStore(clock),
        namespace="c",
        lease=timedelta(seconds=30),
        ttl=timedelta(hours=1),
        clock=clock,
    )
    return MessageProcessor(handler=handler, dedup=dedup, gate=gate, clock=clock)  # type: ignore[arg-type]


def _scene() -> tuple[
    ManualClock,
    LosesWrites,
    list[list[int]],
    list[Callable[[], None]],
    Callable[[list[Message]], None],
]:
    """A clock, a store that can lose writes, the batches the handler ran, and the handler -
    which runs what the test put in ``during`` while it runs (a store loss, another delivery)."""
    clock = ManualClock()
    store = LosesWrites(clock=clock)
    ran: list[list[int]] = []
    during: list[Callable[[], None]] = []

    def handler(messages: list[Message]) -> None:
        ran.append([int(m.data) for m in messages])
        while during:
            during.pop()()

    return clock, store, ran, during, handler


def _alerts(caplog: pytest.LogCaptureFixture, outcome: str) -> list[int]:
    decisions = [getattr(r, "decision", {}) for r in caplog.records]
    return [int(d["fifo_seq"]) for d in decisions if d.get("outcome") == outcome]


def test_a_batch_whose_own_process_repaired_a_store_loss_meanwhile_advances_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    clock, store, ran, during, handler = _scene()
    processor = _processor(store, clock, handler)
    assert processor.process_batch([_message(1), _message(2)]) == ["processed", "processed"]
    before = store.snapshot()  # #1-#2 recorded, no lease

    def loss_then_own_delivery() -> None:
        store.restore(before)  # the store loses the batch's lease write
        clock.advance(timedelta(seconds=5))
        # Another thread of this process: its read finds the loss and repairs it, keeping
        # the running batch's live lease (under a new token).
        assert processor.process(_message(6)) == "parked"

    during.append(loss_then_own_delivery)
    results = processor.process_batch([_message(3), _message(4)])
    assert _alerts(caplog, "lease_outlived") == []  # nobody took the group over
    assert results == ["processed", "processed"]
    clock.advance(timedelta(minutes=5))  # past every lease: a sweep finds nothing to rerun
    processor.gate.sweep("g")
    assert ran == [[1, 2], [3, 4]]


def test_a_batch_fenced_by_another_process_repair_is_not_rerun_by_its_own_call(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    clock, store, ran, during, handler = _scene()
    here = _processor(store, clock, handler)
    other = _processor(store, clock, handler)  # another process on the same store
    before = store.snapshot()  # nothing recorded yet

    def other_process_repairs() -> None:
        assert other.process(_message(5)) == "parked"  # it sees the batch's lease
        store.restore(before)  # the store loses everything since
        clock.advance(timedelta(seconds=5))
        # Its next read finds the loss; its repair fences every lease and runs nothing.
        assert other.process(_message(6)) == "parked"

    during.append(other_process_repairs)
    results = here.process_batch([_message(1), _message(2)])
    assert sorted(_alerts(caplog, "lease_outlived")) == [1, 2]  # fenced, and said so
    assert ran == [[1, 2]]  # not run again by the very call that was fenced
    assert not any(r == "processed" for r in results), results  # nacked, as deliver does
