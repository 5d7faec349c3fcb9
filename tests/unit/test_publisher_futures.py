"""Publisher futures: publish returns at once, publish_batch hands every item over before it
waits, FIFO numbers come one block for every message waiting, in per-group order.

The sink here is an in-process implementation of our own FutureSink protocol whose futures
the test settles itself, so "handed over before waited for" is observable without timing.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future

import pytest

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.errors import StoreUnavailableError
from pubsub_toolkit.message import OutboundMessage
from pubsub_toolkit.producer.publisher import Publisher
from pubsub_toolkit.stores.counters.base import SequenceBlock
from pubsub_toolkit.stores.counters.memory import MemorySequenceCounter
from tests.support.sinks import RecordingSink
from tests.support.waiting import wait_until

TOPIC = "projects/p/topics/origin"
DEADLINE = 10.0  # seconds to wait for a condition; never a measured duration


class HeldSink:
    """A FutureSink whose futures stay pending until the test settles them (no blocking
    ``publish``: the Publisher must not wait on a message before handing over the next)."""

    def __init__(self, *, settle_at_once: bool = False) -> None:
        self.held: list[tuple[OutboundMessage, Future[str]]] = []
        self._lock = threading.Lock()
        self._settle_at_once = settle_at_once

    def publish_future(self, topic: str, message: OutboundMessage) -> Future[str]:
        future: Future[str] = Future()
        with self._lock:
            self.held.append((message, future))
            if self._settle_at_once:
                future.set_result(f"id-{len(self.held)}")
        return future

    def settle_all(self) -> None:
        with self._lock:
            for n, (_, future) in enumerate(self.held, 1):
                if not future.done():
                    future.set_result(f"id-{n}")

    def numbers(self) -> list[int]:
        with self._lock:
            return [int(m.attributes[attr.FIFO_SEQ]) for m, _ in self.held]


class GatedCounter:
    """A memory counter whose first reservation waits for ``release`` (a slow round trip)."""

    def __init__(self) -> None:
        self.inner = MemorySequenceCounter()
        self.calls: list[int] = []
        self.release = threading.Event()

    def reserve(self, group: str, count: int = 1) -> SequenceBlock:
        self.calls.append(count)
        if len(self.calls) == 1 and not self.release.wait(DEADLINE):
            raise AssertionError("the test never released the first reservation")
        return self.inner.reserve(group, count)

    def current(self, group: str) -> int:
        return self.inner.current(group)


class DownCounter:
    """A counter whose store cannot be reached."""

    def reserve(self, group: str, count: int = 1) -> SequenceBlock:
        raise StoreUnavailableError("the counter's store is down")

    def current(self, group: str) -> int:
        raise StoreUnavailableError("the counter's store is down")


def test_plain_publish_returns_the_sinks_own_future_unwaited() -> None:
    sink = HeldSink()
    future = Publisher(sink, TOPIC).publish(b"x", {"k": "v"})
    [(message, held)] = sink.held
    assert future is held  # the client's future itself, not a copy
    assert not future.done()
    held.set_result("m-1")
    assert future.result(timeout=DEADLINE) == "m-1"
    assert dict(message.attributes) == {"k": "v"}


def test_publish_batch_hands_every_item_over_before_it_waits() -> None:
    sink = HeldSink()
    publisher = Publisher(sink, TOPIC, MemorySequenceCounter())
    items = [(f"m{i}".encode(), {}) for i in range(20)]
    result: list[list[str]] = []
    batch = threading.Thread(target=lambda: result.append(publisher.publish_batch("g", items)))
    batch.start()
    # All 20 reach the sink while none is settled: one wait, not 20 round trips.
    wait_until(
        lambda: len(sink.held) == 20,
        timeout=DEADLINE,
        interval=0.005,
        what="all 20 handed to the sink before any settled",
    )
    assert result == [], "publish_batch returned before its messages were accepted"
    sink.settle_all()
    batch.join(DEADLINE)
    assert result == [[f"id-{n}" for n in range(1, 21)]]
    assert sink.numbers() == list(range(1, 21))


def test_fifo_messages_waiting_for_a_number_share_one_reservation() -> None:
    sink, counter = HeldSink(settle_at_once=True), GatedCounter()
    publisher = Publisher(sink, TOPIC, counter)
    futures = [publisher.publish(b"m0", fifo_group="g")]
    wait_until(
        lambda: counter.calls == [1],
        timeout=DEADLINE,
        interval=0.005,
        what="the first reservation under way",
    )
    futures += [publisher.publish(f"m{i}".encode(), fifo_group="g") for i in range(1, 10)]
    counter.release.set()
    assert [f.result(timeout=DEADLINE) for f in futures] == [f"id-{n}" for n in range(1, 11)]
    assert counter.calls == [1, 9]  # the nine that waited: ONE round trip, no block ahead
    assert counter.current("g") == 10
    assert sink.numbers() == list(range(1, 11))


def test_a_retry_queued_before_its_first_copy_was_numbered_takes_the_same_number() -> None:
    sink, counter = HeldSink(settle_at_once=True), GatedCounter()
    publisher = Publisher(sink, TOPIC, counter)
    first = publisher.publish(b"warm-up", fifo_group="g")
    wait_until(
        lambda: counter.calls == [1],
        timeout=DEADLINE,
        interval=0.005,
        what="the first reservation under way",
    )
    a = publisher.publish(b"A", fifo_group="g", dedup_key="order-A")
    b = publisher.publish(b"B", fifo_group="g", dedup_key="order-B")
    retry = publisher.publish(b"A", fifo_group="g", dedup_key="order-A")  # did not wait for a
    counter.release.set()
    for future in (first, a, b, retry):
        future.result(timeout=DEADLINE)
    assert counter.calls == [1, 2]  # A and B; the retry is A again, not a third number
    numbered = [
        (m.attributes.get(attr.DEDUP_KEY), int(m.attributes[attr.FIFO_SEQ])) for m, _ in sink.held
    ]
    assert numbered == [(None, 1), ("order-A", 2), ("order-B", 3), ("order-A", 2)]


def test_eight_threads_in_one_group_get_unique_contiguous_increasing_numbers() -> None:
    sink = HeldSink(settle_at_once=True)
    publisher = Publisher(sink, TOPIC, MemorySequenceCounter())
    per_thread, start = 200, threading.Barrier(8)
    futures: dict[int, list[Future[str]]] = {}

    def produce(t: int) -> None:
        start.wait(DEADLINE)
        futures[t] = [
            publisher.publish(f"{t}-{i}".encode(), fifo_group="g", dedup_key=f"{t}-{i}")
            for i in range(per_thread)
        ]

    threads = [threading.Thread(target=produce, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE)
    for fs in futures.values():
        for f in fs:
            f.result(timeout=DEADLINE)
    numbers = sink.numbers()
    assert numbers == list(range(1, 8 * per_thread + 1)), "the client got them out of order"
    by_key = {m.attributes[attr.DEDUP_KEY]: int(m.attributes[attr.FIFO_SEQ]) for m, _ in sink.held}
    for t in range(8):
        mine = [by_key[f"{t}-{i}"] for i in range(per_thread)]
        assert mine == sorted(mine), f"thread {t}'s messages were numbered out of its order"


def test_a_failed_fifo_publish_is_the_futures_exception_and_a_logged_gap(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink, counter = HeldSink(), MemorySequenceCounter()
    future = Publisher(sink, TOPIC, counter).publish(b"x", fifo_group="g")
    wait_until(
        lambda: len(sink.held) == 1,
        timeout=DEADLINE,
        interval=0.005,
        what="the message handed to the sink",
    )
    with caplog.at_level(logging.WARNING):
        sink.held[0][1].set_exception(ConnectionError("the publish failed"))
        with pytest.raises(ConnectionError):
            future.result(timeout=DEADLINE)
    assert "fifo_seq 1" in caplog.text
    assert counter.current("g") == 1  # spent: a gap, never reused


def test_an_unreachable_counter_fails_the_future_and_publishes_nothing() -> None:
    sink = HeldSink()
    future = Publisher(sink, TOPIC, DownCounter()).publish(b"x", fifo_group="g")
    with pytest.raises(StoreUnavailableError):
        future.result(timeout=DEADLINE)
    assert sink.held == []


def test_a_blocking_sink_still_works_and_its_future_is_settled() -> None:
    sink = RecordingSink()
    publisher = Publisher(sink, TOPIC, MemorySequenceCounter())
    future = publisher.publish(b"x", fifo_group="g")
    assert future.done()
    assert future.result() == "1"
    assert [m.attributes[attr.FIFO_SEQ] for m in sink.on(TOPIC)] == ["1"]
