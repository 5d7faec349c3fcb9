"""The leader/follower coalescer behind Firestore group commit and Redis pipelining."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from pubsub_toolkit.stores._coalesce import Coalescer, Operation


class RecordingFlush:
    """A flush that applies each operation to a list and records batch sizes."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.batches: list[int] = []
        self.gate = gate
        self.lock = threading.Lock()

    def __call__(self, operations: Sequence[Operation]) -> None:
        if self.gate is not None:
            self.gate.wait(timeout=10)  # hold the first flush so others queue behind it
        with self.lock:
            self.batches.append(len(operations))
        for operation in operations:
            sink: list[object] = []
            try:
                operation.apply(sink)
            except ValueError as exc:
                operation.finish(error=exc)
            else:
                operation.finish(result=sink[0])


def test_alone_an_operation_is_flushed_at_once() -> None:
    flush = RecordingFlush()
    coalescer = Coalescer(flush)
    assert coalescer.run(lambda sink: sink.append("a")) == "a"
    assert flush.batches == [1]


def test_concurrent_operations_share_flushes_and_each_gets_its_own_result() -> None:
    gate = threading.Event()
    flush = RecordingFlush(gate)
    coalescer = Coalescer(flush)
    with ThreadPoolExecutor(32) as pool:
        futures = [pool.submit(coalescer.run, lambda sink, i=i: sink.append(i)) for i in range(200)]
        gate.set()
        results = [f.result(timeout=30) for f in futures]
    assert results == list(range(200))
    assert sum(flush.batches) == 200
    assert len(flush.batches) < 200, "nothing was coalesced"


def test_an_error_reaches_only_its_own_caller() -> None:
    coalescer = Coalescer(RecordingFlush())

    def bad(sink: list[object]) -> None:
        raise ValueError("mine")

    with pytest.raises(ValueError, match="mine"):
        coalescer.run(bad)
    assert coalescer.run(lambda sink: sink.append("next")) == "next"


def test_a_failing_flush_fails_its_batch_and_the_next_caller_still_proceeds() -> None:
    calls = {"n": 0}

    def flush(operations: Sequence[Operation]) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise ConnectionError("store down")
        for operation in operations:
            operation.finish(result="ok")

    coalescer = Coalescer(flush)
    with pytest.raises(ConnectionError):
        coalescer.run(lambda batch: None)
    assert coalescer.run(lambda batch: None) == "ok"


def test_a_failing_flush_fails_every_waiting_caller_none_gets_a_silent_none() -> None:
    gate = threading.Event()

    def flush(operations: Sequence[Operation]) -> None:
        gate.wait(timeout=10)
        raise ConnectionError("store down")

    coalescer = Coalescer(flush)
    with ThreadPoolExecutor(5) as pool:
        futures = [pool.submit(coalescer.run, lambda batch: None) for _ in range(5)]
        gate.set()
        errors = [f.exception(timeout=30) for f in futures]
    assert all(isinstance(e, ConnectionError) for e in errors), errors


def test_operations_on_one_key_never_share_a_flush() -> None:
    gate = threading.Event()
    seen: list[list[str | None]] = []

    def flush(operations: Sequence[Operation]) -> None:
        gate.wait(timeout=10)
        seen.append([o.key for o in operations])
        for operation in operations:
            operation.finish(result=operation.key)

    coalescer = Coalescer(flush)
    keys = ["a", "a", "b", "a", "b", "c"] * 5
    with ThreadPoolExecutor(16) as pool:
        futures = [pool.submit(coalescer.run, lambda batch: None, key=k) for k in keys]
        gate.set()
        assert [f.result(timeout=30) for f in futures] == keys
    assert all(len(batch) == len(set(batch)) for batch in seen), seen
    assert any(len(batch) > 1 for batch in seen), "nothing was coalesced"


def test_on_idle_runs_when_leadership_ends_never_during_a_flush() -> None:
    """The Redis dedup store keeps its connection between back-to-back flushes and returns
    it in ``on_idle``: so on_idle must never overlap a flush or an alone call, and must run
    once the last caller is served."""
    state = {"busy": 0, "overlaps": 0, "idles": 0}
    lock = threading.Lock()

    def enter() -> None:
        with lock:
            state["busy"] += 1

    def leave() -> None:
        with lock:
            state["busy"] -= 1

    def flush(operations: Sequence[Operation]) -> None:
        enter()
        try:
            for operation in operations:
                operation.finish(result=1)
        finally:
            leave()

    def on_idle() -> None:
        with lock:
            state["idles"] += 1
            if state["busy"]:
                state["overlaps"] += 1

    def alone() -> int:
        enter()
        try:
            return 2
        finally:
            leave()

    coalescer = Coalescer(flush, on_idle=on_idle)
    assert coalescer.run(lambda sink: None, alone=alone) == 2
    assert state["idles"] == 1  # a lone call: idle again at once

    def call(n: int) -> int:
        if n % 2:
            return int(coalescer.run(lambda sink: None))
        return int(coalescer.run(lambda sink: None, alone=alone))

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(call, range(4000)))
    assert set(results) <= {1, 2}
    assert state["overlaps"] == 0
    assert state["busy"] == 0
    assert coalescer.run(lambda sink: None, alone=alone) == 2  # and leadership was given back
