"""The Publisher's numbering thread reserves every waiting group's block in ONE counter round
trip (``RedisSequenceCounter.reserve_many``) instead of one per group.

Why it matters: the numbering thread waits for each round trip, and in a busy process a thread
back from a socket waits again for the GIL (up to the 5 ms switch interval), so eight groups
cost eight such waits per drain. Measured in bench/publisher.py; here the machine-independent
count: round trips per drain, and the blocks being the same numbers separate reservations give.
"""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import Future

import pytest

from pubsub_toolkit.errors import StoreUnavailableError
from pubsub_toolkit.message import OutboundMessage
from pubsub_toolkit.producer.publisher import Publisher
from pubsub_toolkit.stores.counters.base import SequenceBlock
from pubsub_toolkit.stores.counters.redis import RedisSequenceCounter
from pubsub_toolkit_local.processes import free_port

GROUPS = 8


class CountingCounter(RedisSequenceCounter):
    """The Redis counter, counting its round trips (each ``reserve`` or ``reserve_many``)."""

    def __init__(self, url: str) -> None:
        base = RedisSequenceCounter.from_url(url, prefix=f"test-{uuid.uuid4().hex[:8]}:")
        self.__dict__.update(base.__dict__)
        self.round_trips = 0
        self.many_calls: list[dict[str, int]] = []

    def reserve(self, group: str, count: int = 1) -> SequenceBlock:
        self.round_trips += 1
        return super().reserve(group, count)

    def reserve_many(self, requests: dict[str, int]) -> dict[str, SequenceBlock]:  # type: ignore[override]
        self.round_trips += 1
        self.many_calls.append(dict(requests))
        return super().reserve_many(requests)


class HeldSink:
    """Our own sink protocol: each publish's future settles when the test releases them, so
    everything published meanwhile waits in the numbering queue together."""

    def __init__(self) -> None:
        self.sent: list[OutboundMessage] = []
        self.gate = threading.Event()
        self._lock = threading.Lock()

    def publish(self, topic: str, message: OutboundMessage) -> str:
        raise AssertionError("the fast path is used")

    def publish_future(self, topic: str, message: OutboundMessage) -> Future[str]:
        self.gate.wait(timeout=30)
        with self._lock:
            self.sent.append(message)
            future: Future[str] = Future()
            future.set_result(str(len(self.sent)))
            return future


def test_reserve_many_gives_what_separate_reservations_would(redis_url: str) -> None:
    counter = RedisSequenceCounter.from_url(redis_url, prefix=f"t-{uuid.uuid4().hex[:8]}:")
    first = counter.reserve("a", 2)
    blocks = counter.reserve_many({"a": 3, "b": 2})
    assert (blocks["a"].first, blocks["a"].last, blocks["a"].epoch) == (3, 5, first.epoch)
    assert (blocks["b"].first, blocks["b"].last) == (1, 2)
    assert counter.reserve("b").first == 3
    assert counter.current("a") == 5


def test_reserve_many_fails_closed_when_redis_is_down() -> None:
    counter = RedisSequenceCounter.from_url(f"redis://127.0.0.1:{free_port()}/0")
    with pytest.raises(StoreUnavailableError):
        counter.reserve_many({"a": 1, "b": 1})


def test_the_numbering_thread_reserves_all_waiting_groups_in_one_round_trip(
    redis_url: str,
) -> None:
    counter = CountingCounter(redis_url)
    sink = HeldSink()
    publisher = Publisher(sink, "projects/p/topics/t", counter)
    # The first message starts the numbering thread, which then waits inside the sink (held):
    # the next 80 messages of 8 groups queue up behind it, as a busy producer's do.
    first = publisher.publish(b"m0", fifo_group="g0")
    futures = [
        publisher.publish(f"m{n}".encode(), fifo_group=f"g{n % GROUPS}") for n in range(1, 81)
    ]
    sink.gate.set()
    for future in [first, *futures]:
        future.result(timeout=30)
    assert counter.round_trips <= 3, counter.round_trips  # was one per group per drain: 9
    assert any(len(call) == GROUPS for call in counter.many_calls)
    numbers: dict[str, list[int]] = {}
    for message in sink.sent:
        numbers.setdefault(message.attributes["fifo_group"], []).append(
            int(message.attributes["fifo_seq"])
        )
    # Each group's numbers reached the sink in order, 1..N, none skipped.
    assert {g: ns == list(range(1, len(ns) + 1)) for g, ns in numbers.items()} == dict.fromkeys(
        numbers, True
    )
    assert sum(len(ns) for ns in numbers.values()) == 81
