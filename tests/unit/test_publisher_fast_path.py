"""The Publisher's fast path: a FIFO message's future before and after it reaches the client,
one hand-over per group and round (``publish_run``), one gap check per run, and the remembered
validation, which must still refuse what the contract refuses.

The sinks here implement our own protocols; the test settles their futures itself, so "before
the client has it" is observable without timing.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future

import pytest

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.producer.publisher import Publisher
from pubsub_toolkit.producer.sink import PublishFuture
from pubsub_toolkit.stores.counters.base import SequenceBlock
from pubsub_toolkit.stores.counters.memory import MemorySequenceCounter
from tests.support.waiting import wait_until

TOPIC = "projects/p/topics/origin"
DEADLINE = 10.0  # seconds to wait for a condition; never a measured duration


class RunSink:
    """A sink with ``publish_run`` whose futures stay pending until the test settles them."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, list[dict[str, str]]]] = []
        self.futures: list[Future[str]] = []
        self._lock = threading.Lock()

    def publish(self, topic: str, message: object) -> str:
        raise AssertionError("the fast path is used")

    def publish_one(self, topic: str, data: bytes, attributes: Mapping[str, str]) -> Future[str]:
        [future] = self.publish_run(topic, "", [data], [attributes])
        return future  # type: ignore[return-value]

    def publish_run(
        self,
        topic: str,
        ordering_key: str,
        data: Sequence[bytes],
        attributes: Sequence[Mapping[str, str]],
    ) -> list[PublishFuture]:
        futures: list[PublishFuture] = []
        with self._lock:
            self.runs.append((ordering_key, [dict(a) for a in attributes]))
            for _ in data:
                future: Future[str] = Future()
                self.futures.append(future)
                futures.append(future)
        return futures

    def handed(self) -> int:
        with self._lock:
            return len(self.futures)


class GatedCounter(MemorySequenceCounter):
    """A memory counter whose first reservation waits for ``release`` (a slow round trip)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.release = threading.Event()

    def reserve(self, group: str, count: int = 1) -> SequenceBlock:
        self.calls += 1
        if self.calls == 1 and not self.release.wait(DEADLINE):
            raise AssertionError("the test never released the first reservation")
        return super().reserve(group, count)


def held_publisher() -> tuple[Publisher, RunSink, GatedCounter]:
    """A Publisher whose numbering thread is held in its first reservation."""
    sink, counter = RunSink(), GatedCounter()
    publisher = Publisher(sink, TOPIC, counter)
    publisher.publish(b"warm-up", fifo_group="g")
    wait_until(lambda: counter.calls == 1, timeout=DEADLINE, interval=0.005, what="held")
    return publisher, sink, counter


def test_a_fifo_future_before_its_message_reaches_the_client() -> None:
    publisher, sink, counter = held_publisher()
    future = publisher.publish(b"m", fifo_group="g")
    assert not future.done()
    assert future.cancel() is False  # a publish cannot be cancelled, as the client's future
    with pytest.raises(TimeoutError):
        future.result(timeout=0.01)
    with pytest.raises(TimeoutError):
        future.exception(timeout=0.01)
    seen: list[object] = []
    future.add_done_callback(seen.append)  # kept until the message reaches the client
    counter.release.set()
    wait_until(lambda: sink.handed() == 2, timeout=DEADLINE, interval=0.005, what="handed")
    assert seen == []
    for n, f in enumerate(sink.futures, 1):
        f.set_result(f"id-{n}")
    assert future.result(timeout=DEADLINE) == "id-2"
    assert seen == [future]  # called with the caller's future, once settled
    later: list[object] = []
    future.add_done_callback(later.append)  # settled already: called at once
    assert later == [future]
    assert future.done()
    assert future.exception(timeout=DEADLINE) is None


def test_a_callback_added_while_the_message_is_with_the_client_is_called_once_settled() -> None:
    publisher, sink, counter = held_publisher()
    counter.release.set()
    future = publisher.publish(b"m", fifo_group="g")
    wait_until(lambda: sink.handed() == 2, timeout=DEADLINE, interval=0.005, what="handed")
    seen: list[object] = []
    future.add_done_callback(seen.append)
    assert seen == []
    sink.futures[1].set_exception(ConnectionError("refused"))
    assert seen == [future]
    assert isinstance(future.exception(timeout=DEADLINE), ConnectionError)


def test_messages_waiting_together_reach_the_client_in_one_run_per_group() -> None:
    publisher, sink, counter = held_publisher()
    for n in range(5):
        publisher.publish(f"a{n}".encode(), fifo_group="a")
        publisher.publish(f"b{n}".encode(), fifo_group="b", dedup_key=f"b{n}")
    counter.release.set()
    wait_until(lambda: sink.handed() == 11, timeout=DEADLINE, interval=0.005, what="handed")
    runs = {key: [int(a[attr.FIFO_SEQ]) for a in run] for key, run in sink.runs[1:]}
    assert len(sink.runs) == 3  # the warm-up's, then ONE run per group for what waited
    assert runs == {"a": [1, 2, 3, 4, 5], "b": [1, 2, 3, 4, 5]}
    assert all(a[attr.FIFO_GROUP] == key for key, run in sink.runs for a in run)


def test_a_failed_message_of_a_run_is_a_logged_gap_however_the_run_settles(
    caplog: pytest.LogCaptureFixture,
) -> None:
    publisher, sink, counter = held_publisher()
    futures = [publisher.publish(f"m{n}".encode(), fifo_group="g") for n in range(4)]
    counter.release.set()
    wait_until(lambda: sink.handed() == 5, timeout=DEADLINE, interval=0.005, what="handed")
    sink.futures[0].set_result("warm-up")
    first, second, third, last = sink.futures[1:]
    with caplog.at_level(logging.WARNING):
        second.set_exception(ConnectionError("refused"))
        last.set_result("id-last")  # the run's last settles before two of the others
        third.set_exception(ConnectionError("refused"))
        first.set_result("id-first")
    gaps = [r.getMessage() for r in caplog.records if "stays unused" in r.getMessage()]
    assert len(gaps) == 2
    assert "fifo_seq 3 " in gaps[0] and "fifo_seq 4 " in gaps[1]  # after warm-up's 1
    assert [f.exception(timeout=DEADLINE) is None for f in futures] == [True, False, False, True]


def test_attributes_validated_before_still_refuse_data_the_contract_refuses() -> None:
    publisher = Publisher(RunSink(), TOPIC, MemorySequenceCounter())
    publisher.publish(b"x" * 100, {"kind": "a"})  # these attributes pass with 100 bytes
    with pytest.raises(ValueError, match="no data"):
        publisher.publish(b"", {"kind": "a"})
    with pytest.raises(ValueError, match="bytes; at most"):
        publisher.publish(b"x" * attr.MAX_MESSAGE_BYTES, {"kind": "a"})
    with pytest.raises(TypeError):
        publisher.publish("text", {"kind": "a"})  # type: ignore[arg-type]
    publisher.publish(b"x", fifo_group="g")
    with pytest.raises(ValueError, match="no data"):
        publisher.publish(b"", fifo_group="g")


def test_a_settled_message_is_returned_though_the_rest_of_its_run_never_is() -> None:
    # A caller waiting for a message not yet answered first waits for its run's last message
    # (one wake-up for the run, up to RUN_WAIT); one already answered is returned at once.
    publisher, sink, counter = held_publisher()
    first = publisher.publish(b"m1", fifo_group="g")
    second = publisher.publish(b"m2", fifo_group="g")
    counter.release.set()
    wait_until(lambda: sink.handed() == 3, timeout=DEADLINE, interval=0.005, what="handed")
    sink.futures[0].set_result("warm-up")
    # The run is first and second; only first is answered, second stays with the client.
    sink.futures[1].set_result("id-1")
    assert first.result(timeout=0.05) == "id-1"  # less than RUN_WAIT: not waited for second
    assert not second.done()
    with pytest.raises(TimeoutError):
        second.result(timeout=0.01)


def test_fifo_futures_work_with_concurrent_futures_wait_and_as_completed() -> None:
    # google-cloud-pubsub's own samples wait on publish futures with concurrent.futures.wait;
    # its futures are concurrent.futures.Future, so a FIFO publish's must work there too -
    # before the message reaches the client, while the client has it, and once settled.
    publisher, sink, counter = held_publisher()
    futures = [publisher.publish(f"m{n}".encode(), fifo_group="g") for n in range(3)]
    assert all(isinstance(f, concurrent.futures.Future) for f in futures)
    done, not_done = concurrent.futures.wait(futures, timeout=0.01)
    assert (done, not_done) == (set(), set(futures))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(concurrent.futures.wait, futures, DEADLINE)
        # The waiter is installed on every future before any message reaches the client.
        wait_until(
            lambda: all(f._waiters for f in futures),  # type: ignore[attr-defined]
            timeout=DEADLINE,
            interval=0.005,
            what="concurrent.futures.wait to wait on every future",
        )
        counter.release.set()
        wait_until(lambda: sink.handed() == 4, timeout=DEADLINE, interval=0.005, what="handed")
        sink.futures[0].set_result("warm-up")
        sink.futures[1].set_result("id-1")
        sink.futures[2].set_exception(ConnectionError("refused"))
        sink.futures[3].set_result("id-3")
        done, not_done = waiting.result(timeout=DEADLINE)
    assert (done, not_done) == (set(futures), set())
    assert set(concurrent.futures.as_completed(futures, timeout=DEADLINE)) == set(futures)
    assert {f.exception(timeout=DEADLINE) is None for f in futures} == {True, False}
    assert "finished" in repr(futures[0])
