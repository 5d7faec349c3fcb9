"""One group's failure in ``RedisSequenceCounter.reserve_many`` (one round trip for every group
waiting in the Publisher) is that group's alone, against a real redis-server.

The pipeline runs one script per group, each atomic on its own: a script that errors for one
group (its key holds something else than a counter) leaves the others' increments applied. The
call used to raise for the whole batch, and the Publisher then failed every group's messages -
numbers reserved in Redis for the healthy groups and never published: a gap their consumer
waits at for ever under gap policy ``wait``. Now each group's outcome comes back on its own, a
script checks its key before it writes anything (a failed group reserved nothing), and the
Publisher fails only that group's messages.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import Future

import pytest
import redis

from pubsub_toolkit.errors import StoreUnavailableError
from pubsub_toolkit.message import OutboundMessage
from pubsub_toolkit.producer.publisher import Publisher
from pubsub_toolkit.stores.counters.base import SequenceBlock
from pubsub_toolkit.stores.counters.redis import RedisSequenceCounter
from pubsub_toolkit_local.processes import free_port
from tests.integration.test_redis_cluster import cluster_url  # noqa: F401 - a fixture


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(redis_url)
    yield connection
    connection.close()


@pytest.fixture
def prefix() -> str:
    return f"t-{uuid.uuid4().hex[:8]}:"


# What a key that is no counter can hold: each makes the reservation script fail for it.
BROKEN = {
    "a list": lambda c, key: c.rpush(key, "x"),
    "a string that is no number": lambda c, key: c.set(key, "abc"),
    "a negative number": lambda c, key: c.set(key, "-5"),
    "a hash without its epoch": lambda c, key: c.hset(key, "n", "4"),
    "a hash whose number is no number": lambda c, key: c.hset(key, mapping={"n": "x", "e": "1"}),
}


@pytest.mark.parametrize("broken", list(BROKEN))
def test_one_groups_failure_is_its_own_and_the_others_keep_their_blocks(
    redis_url: str, client: redis.Redis, prefix: str, broken: str
) -> None:
    counter = RedisSequenceCounter.from_url(redis_url, prefix=prefix)
    counter.reserve("a", 2)
    BROKEN[broken](client, f"{prefix}bad")
    before = client.dump(f"{prefix}bad")
    outcomes = counter.reserve_many({"a": 3, "bad": 2, "b": 1})
    a, b = outcomes["a"], outcomes["b"]
    assert isinstance(a, SequenceBlock) and (a.first, a.last) == (3, 5)
    assert isinstance(b, SequenceBlock) and (b.first, b.last) == (1, 1)
    assert isinstance(outcomes["bad"], Exception)
    # The failed group's script wrote nothing: its key is as it was, byte for byte.
    assert client.dump(f"{prefix}bad") == before
    assert (counter.current("a"), counter.current("b")) == (5, 1)


def test_on_a_cluster_one_groups_failure_is_its_own_too(
    cluster_url: str,  # noqa: F811 - the fixture imported above
    prefix: str,
) -> None:
    counter = RedisSequenceCounter.from_url(cluster_url, prefix=prefix)
    cluster = redis.cluster.RedisCluster.from_url(cluster_url)
    try:
        cluster.rpush(f"{prefix}bad", "x")
        outcomes = counter.reserve_many({"a": 2, "bad": 1, "b": 3})
    finally:
        cluster.close()
    a, b = outcomes["a"], outcomes["b"]
    assert isinstance(a, SequenceBlock) and (a.first, a.last) == (1, 2)
    assert isinstance(b, SequenceBlock) and (b.first, b.last) == (1, 3)
    assert isinstance(outcomes["bad"], Exception)


def test_a_counter_written_before_epochs_still_becomes_a_hash_and_keeps_its_numbers(
    redis_url: str, client: redis.Redis, prefix: str
) -> None:
    client.set(f"{prefix}old", "7")
    counter = RedisSequenceCounter.from_url(redis_url, prefix=prefix)
    outcomes = counter.reserve_many({"old": 2, "new": 1})
    old = outcomes["old"]
    assert isinstance(old, SequenceBlock) and (old.first, old.last) == (8, 9) and old.epoch > 0
    assert client.type(f"{prefix}old") == b"hash"
    assert counter.reserve("old").first == 10


def test_a_redis_that_is_down_fails_every_group_with_store_unavailable() -> None:
    counter = RedisSequenceCounter.from_url(f"redis://127.0.0.1:{free_port()}/0")
    with pytest.raises(StoreUnavailableError):
        counter.reserve_many({"a": 1, "b": 1})


class HeldSink:
    """A future-returning sink whose first publish waits for the test: everything published
    meanwhile queues up, so the numbering thread reserves it all in one ``reserve_many``."""

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


def test_the_publisher_fails_only_the_broken_groups_messages_and_leaves_no_gap(
    redis_url: str, client: redis.Redis, prefix: str
) -> None:
    counter = RedisSequenceCounter.from_url(redis_url, prefix=prefix)
    client.rpush(f"{prefix}bad", "x")  # a key that is no counter
    sink = HeldSink()
    publisher = Publisher(sink, "projects/p/topics/t", counter)
    first = publisher.publish(b"first", fifo_group="a")  # holds the numbering thread
    waiting = {
        group: [publisher.publish(f"{group}{n}".encode(), fifo_group=group) for n in range(3)]
        for group in ("a", "bad", "b")
    }
    sink.gate.set()
    assert first.result(timeout=30)
    for group in ("a", "b"):
        for future in waiting[group]:
            assert future.result(timeout=30)
    for future in waiting["bad"]:
        assert future.exception(timeout=30) is not None
    published: dict[str, list[int]] = {}
    for message in sink.sent:
        group = message.attributes["fifo_group"]
        published.setdefault(group, []).append(int(message.attributes["fifo_seq"]))
    assert published == {"a": [1, 2, 3, 4], "b": [1, 2, 3]}
    # Every number the counter handed out was published: no gap for a consumer to wait at.
    assert (counter.current("a"), counter.current("b")) == (4, 3)
    assert client.type(f"{prefix}bad") == b"list"
