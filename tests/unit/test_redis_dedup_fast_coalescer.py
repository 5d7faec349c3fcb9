"""The coalescer's ``alone`` fast path, which the Redis and Firestore dedup stores use.

Alone, an operation must skip the batching machinery (no flush at all); while one runs, a
newcomer must queue and be flushed after it (never run beside it: the Redis store's private
connection carries one call at a time), and leadership must never be lost, even when the alone
call raises.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from pubsub_toolkit.stores._coalesce import Coalescer, Operation
from tests.support.waiting import wait_until


class RecordingFlush:
    def __init__(self) -> None:
        self.batches: list[list[object]] = []

    def __call__(self, operations: Sequence[Operation]) -> None:
        sink: list[object] = []
        for operation in operations:
            operation.apply(sink)
        self.batches.append(sink)
        for operation, value in zip(operations, sink, strict=True):
            operation.finish(result=value)


def test_alone_an_operation_never_reaches_the_flush() -> None:
    flush = RecordingFlush()
    coalescer = Coalescer(flush)
    results = [
        coalescer.run(lambda sink: sink.append("batched"), alone=lambda i=i: i) for i in range(3)
    ]
    assert results == [0, 1, 2]
    assert flush.batches == []


def test_a_newcomer_waits_for_the_alone_call_then_is_flushed() -> None:
    flush = RecordingFlush()
    coalescer = Coalescer(flush)
    inside, release = threading.Event(), threading.Event()
    running = 0
    most = 0
    lock = threading.Lock()

    def alone(value: str) -> str:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        inside.set()
        release.wait(timeout=10)
        with lock:
            running -= 1
        return value

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(
            coalescer.run, lambda sink: sink.append("f"), alone=lambda: alone("first")
        )
        inside.wait(timeout=10)
        second = pool.submit(
            coalescer.run, lambda sink: sink.append("second"), alone=lambda: alone("alone 2")
        )
        wait_until(lambda: coalescer._queue, what="the second operation to queue")
        release.set()
        assert first.result(timeout=10) == "first"
        assert second.result(timeout=10) == "second"  # by the flush, not beside the first
    assert flush.batches == [["second"]]
    assert most == 1


def test_an_error_in_the_alone_call_is_the_callers_and_leadership_is_kept() -> None:
    flush = RecordingFlush()
    coalescer = Coalescer(flush)

    def fail() -> object:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        coalescer.run(lambda sink: sink.append("x"), alone=fail)
    assert (
        coalescer.run(lambda sink: sink.append("x"), alone=lambda: "again alone") == "again alone"
    )
    assert flush.batches == []


def test_many_concurrent_callers_with_alone_each_get_their_own_result() -> None:
    flush = RecordingFlush()
    coalescer = Coalescer(flush)
    with ThreadPoolExecutor(16) as pool:
        results = list(
            pool.map(
                lambda i: coalescer.run(lambda sink: sink.append(i), alone=lambda: i), range(2000)
            )
        )
    assert results == list(range(2000))  # nobody stranded, nobody given another's result
