"""The consumer's function calls per FIFO delivery, pinned (issue 26).

At 64 groups the consumer is CPU-bound, and bench/compare found it 0.93-0.96x of the tree
before the restructuring (602d3ba). bench/consumer_calls.py counts where the calls go; these
tests pin, deterministically (one thread, ``sys.setprofile``), the calls the consumer's own
path makes per delivery - Python calls (a generator's resumption counts as one, as in cProfile)
and bytecode instructions executed - so that a change putting work back on it (a
generator-based context manager per delivery, a closure per effect, a frozen dataclass per
queued item, a walk of a whole window of keys) fails here rather than only in a noisy
benchmark.

The budgets are the counts of the tree that brought them; a change that lowers a count should
lower its budget too. One that raises it needs a reason (then measure the 64-group consumer
with bench/consumer_calls.py, old vs new, before raising the budget).
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from types import FrameType
from typing import Any

import pytest

from pubsub_toolkit import tracing
from pubsub_toolkit.consumer._settle import to_message
from pubsub_toolkit.consumer.convoy import ConvoyDispatcher
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.consumer.processor import MessageProcessor
from pubsub_toolkit.consumer.subscriber import Consumer
from pubsub_toolkit.core.convoy import GroupQueues
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore

WARMUP, MEASURED = 3, 20
# Per delivery on the path measured below (Consumer._process: the receive span, the processor,
# the gate on a memory store with its lease held, the ack, the outcome), counted on CPython
# 3.11 (the project's; bytecode differs between versions). 602d3ba: 304 calls and 11,908
# instructions; the restructured tree before these budgets: 343 and 11,120 (generator context
# managers for the settling and for a number's run, a closure call per effect, the ran keys'
# whole window walked twice per delivery); with them 299.1 and 9,666; with the processor's
# path as a protocol (core/process.py) and rewritten_number's one compare for an unchanged
# window, 284.0 and 8,961.5 (282.1 and 8,954 since ran_before takes no closure).
PROCESS_PYTHON_CALLS = 290
PROCESS_INSTRUCTIONS = 9_100
# GroupQueues.put + take per delivery: 4 calls either way, but 97 instructions with a frozen
# dataclass per queued item (an object.__setattr__ per field, a generated __init__), 80 with a
# named tuple.
QUEUE_PYTHON_CALLS = 4
QUEUE_INSTRUCTIONS = 85
# ConvoyDispatcher.submit of a delivery queued behind its group's running one: 6.75 calls and
# 200 instructions with a frozen dataclass for the dispatcher's item and for the queue's; 4.05
# and 111 with named tuples.
SUBMIT_PYTHON_CALLS = 5
SUBMIT_INSTRUCTIONS = 120


class Received:
    """A stand-in for google-cloud-pubsub's received message."""

    def __init__(self, group: str, seq: int, settled: list[str]) -> None:
        self.data = f"{group}:{seq}".encode()
        self.attributes = {"fifo_group": group, "fifo_seq": str(seq), "dedup_key": f"{seq}"}
        self.message_id, self.publish_time, self.ordering_key = f"m{seq}", None, ""
        self._settled = settled

    def ack(self) -> None:
        self._settled.append("ack")

    def nack(self) -> None:
        self._settled.append("nack")


def counted(run: Callable[[], object]) -> tuple[int, int]:
    """(Python calls, bytecode instructions) that ``run()`` executes in this thread: the
    instructions are the deterministic measure of its CPU (a frozen dataclass's ``__init__``,
    for one, is a call plus an ``object.__setattr__`` per field; a tuple's a few)."""
    calls = [0, 0]

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "opcode":
            calls[1] += 1
        return local

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        calls[0] += 1  # "call": a function's frame starts or a generator's resumes
        frame.f_trace_opcodes = True
        return local

    sys.settrace(trace)
    try:
        run()
    finally:
        sys.settrace(None)
    return calls[0], calls[1]


def consumer() -> Consumer:
    """A Consumer over a processor on memory stores (never started: the test calls its
    per-delivery path in this thread)."""
    handled: list[object] = []
    processor = MessageProcessor(
        handler=handled.append,
        dedup=IdempotentProcessor(
            MemoryDedupStore(), namespace="c", lease=timedelta(seconds=30), ttl=timedelta(days=1)
        ),
        gate=FifoGate(MemoryFifoStore(), consumer="c", handler=handled.append),
    )
    return Consumer("projects/p/subscriptions/s", processor, concurrency=1)


@pytest.fixture(autouse=True)
def as_deployed_by_default(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Count the path as it runs with the library's defaults - decisions logged at INFO are
    not emitted, tracing is off - whatever earlier tests in this worker configured (a test that
    turned INFO on for ``pubsub_toolkit`` added 76 calls per delivery: the log records)."""
    monkeypatch.setattr(tracing._state, "enabled", False)
    library = logging.getLogger("pubsub_toolkit")
    level = library.level
    library.setLevel(logging.WARNING)  # setLevel also clears the loggers' cached levels
    yield
    library.setLevel(level)


def test_a_fifo_delivery_through_the_consumer_stays_within_its_calls() -> None:
    consuming = consumer()
    settled: list[str] = []

    def deliver(seq: int) -> None:
        received = Received("g", seq, settled)
        consuming._process(received, to_message(received))

    for seq in range(1, WARMUP + 1):
        deliver(seq)

    def measured() -> None:
        for seq in range(WARMUP + 1, WARMUP + MEASURED + 1):
            deliver(seq)

    python, instructions = counted(measured)
    assert settled == ["ack"] * (WARMUP + MEASURED)
    per_delivery = (python / MEASURED, instructions / MEASURED)
    assert per_delivery[0] <= PROCESS_PYTHON_CALLS, per_delivery
    assert per_delivery[1] <= PROCESS_INSTRUCTIONS, per_delivery


def test_queuing_a_delivery_for_its_group_stays_within_its_calls() -> None:
    queues: GroupQueues[str] = GroupQueues()

    def one_delivery() -> None:
        queues.put("g", 1, "item")
        queues.take("g")

    python, instructions = counted(one_delivery)
    assert python <= QUEUE_PYTHON_CALLS, (python, instructions)
    assert instructions <= QUEUE_INSTRUCTIONS, (python, instructions)
    assert queues.take("g") == []  # drained: the group is free again


def test_a_delivery_queued_behind_its_group_stays_within_its_calls() -> None:
    dispatcher = ConvoyDispatcher(concurrency=1)
    running, release, drained = threading.Event(), threading.Event(), threading.Event()
    ran: list[int] = []

    def run(seq: int) -> None:
        ran.append(seq)
        if seq == 1 + MEASURED:
            drained.set()

    def first() -> None:
        running.set()
        release.wait()  # the group stays active: later submits queue behind it

    dispatcher.submit("g", 1, first, lambda: None)
    assert running.wait(timeout=30)
    try:

        def queued() -> None:
            for seq in range(2, 2 + MEASURED):
                dispatcher.submit("g", seq, functools.partial(run, seq), lambda: None)

        python, instructions = counted(queued)
    finally:
        release.set()
    assert drained.wait(timeout=30)
    assert dispatcher.close(timeout=30)
    assert ran == list(range(2, 2 + MEASURED))  # each one ran, in order
    per_delivery = (python / MEASURED, instructions / MEASURED)
    assert per_delivery[0] <= SUBMIT_PYTHON_CALLS, per_delivery
    assert per_delivery[1] <= SUBMIT_INSTRUCTIONS, per_delivery
