"""The convoy dispatcher when the work itself raises: never a wedged group.

Work that raises (a batch, one item, or ungrouped work) is logged, its items are handed back
with their ``cancel`` (the consumer's nack) and the group's runner goes on with its queue; the
group is not left marked active, and ``close`` still sees nothing in flight."""

from __future__ import annotations

import logging
import threading

import pytest

from pubsub_toolkit.consumer.convoy import ConvoyDispatcher
from tests.support.waiting import wait_until


def test_raising_work_is_handed_back_and_its_group_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ran: list[int] = []
    handed_back: list[int] = []
    batches: list[list[object]] = []
    gate = threading.Event()

    def run_batch(payloads: list[object]) -> None:
        batches.append(payloads)
        raise RuntimeError("the batch path's own failure")

    def work(seq: int) -> None:
        if seq == 1:
            gate.wait(timeout=10)  # 2-4 queue behind it, and go as one batch
            raise RuntimeError("one item's own failure")
        ran.append(seq)

    dispatcher = ConvoyDispatcher(concurrency=2, batch=3, run_batch=run_batch)
    for seq in (1, 2, 3, 4):
        dispatcher.submit("g", seq, lambda s=seq: work(s), lambda s=seq: handed_back.append(s), seq)
    gate.set()
    wait_until(lambda: not dispatcher.is_active("g"), timeout=10, what="the group to be free")
    assert handed_back == [1, 2, 3, 4]  # 1 alone, then the batch 2-4
    assert batches == [[2, 3, 4]]
    # The group takes work again: a lone item runs its own work.
    dispatcher.submit("g", 5, lambda: work(5), lambda: handed_back.append(5))
    dispatcher.submit(None, 0, lambda: work(0), lambda: handed_back.append(0))
    wait_until(lambda: sorted(ran) == [0, 5], timeout=10, what="5 and the ungrouped work")
    assert dispatcher.close(timeout=10)
    assert handed_back == [1, 2, 3, 4]
    assert sum(r.levelno == logging.ERROR for r in caplog.records) == 2


def test_raising_ungrouped_work_is_handed_back() -> None:
    handed_back: list[str] = []

    def work() -> None:
        raise RuntimeError("ungrouped failure")

    dispatcher = ConvoyDispatcher(concurrency=1)
    dispatcher.submit(None, 0, work, lambda: handed_back.append("x"))
    assert dispatcher.close(timeout=10)
    assert handed_back == ["x"]
