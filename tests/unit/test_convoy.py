"""The convoy dispatcher: per group serial and in order, groups in parallel, clean close."""

from __future__ import annotations

import threading
from collections import defaultdict

from pubsub_toolkit.consumer.convoy import ConvoyDispatcher
from tests.support.waiting import wait_until


def test_one_group_runs_serially_in_sequence_order_groups_in_parallel() -> None:
    dispatcher = ConvoyDispatcher(concurrency=4)
    lock = threading.Lock()
    running: dict[str, int] = defaultdict(int)
    overlap = {"within_group": 0, "max_groups": 0}
    order: dict[str, list[int]] = defaultdict(list)
    release = threading.Event()

    def work(group: str, seq: int) -> None:
        with lock:
            running[group] += 1
            overlap["within_group"] = max(overlap["within_group"], running[group])
            overlap["max_groups"] = max(
                overlap["max_groups"], sum(1 for v in running.values() if v)
            )
        release.wait(timeout=10)
        with lock:
            order[group].append(seq)
            running[group] -= 1

    # Submit each group's numbers backwards: the dispatcher hands them out in order
    # (except the first, which may already be running when the rest arrive).
    for seq in (5, 4, 3, 2, 1):
        for group in ("a", "b", "c", "d"):
            dispatcher.submit(group, seq, lambda g=group, s=seq: work(g, s), lambda: None)
    release.set()
    wait_until(lambda: sum(len(v) for v in order.values()) == 20, timeout=10, what="all work")
    assert overlap["within_group"] == 1
    assert overlap["max_groups"] > 1
    for seqs in order.values():
        assert sorted(seqs) == [1, 2, 3, 4, 5]
        assert seqs[1:] == sorted(seqs[1:])
    assert dispatcher.close(timeout=5)


def test_close_cancels_queued_work_and_waits_for_running_work() -> None:
    dispatcher = ConvoyDispatcher(concurrency=1)
    started, finish = threading.Event(), threading.Event()
    cancelled: list[int] = []
    ran: list[int] = []

    def slow() -> None:
        started.set()
        finish.wait(timeout=10)
        ran.append(1)

    dispatcher.submit("g", 1, slow, lambda: cancelled.append(1))
    started.wait(timeout=5)
    dispatcher.submit("g", 2, lambda: ran.append(2), lambda: cancelled.append(2))
    closer = threading.Thread(target=lambda: dispatcher.close(timeout=10))
    closer.start()
    wait_until(lambda: cancelled == [2], timeout=5, what="queued work to be cancelled")
    finish.set()
    closer.join(timeout=10)
    assert ran == [1]
    dispatcher.submit("g", 3, lambda: ran.append(3), lambda: cancelled.append(3))
    assert cancelled == [2, 3]  # closed: new work is cancelled at once
