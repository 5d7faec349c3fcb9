"""The shared stats stores (memory, real Redis, Firestore emulator) under one contract, and
what flushing costs ingress."""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
import redis
from google.cloud import firestore

from pubsub_toolkit.ingress.pipeline import Ingress
from pubsub_toolkit.message import Message
from pubsub_toolkit.stats import CounterFlusher
from pubsub_toolkit.stores.dedup.redis import RedisDedupStore
from pubsub_toolkit.stores.stats.base import StatsStore
from pubsub_toolkit.stores.stats.firestore import FirestoreStatsStore
from pubsub_toolkit.stores.stats.memory import MemoryStatsStore
from pubsub_toolkit.stores.stats.redis import RedisStatsStore
from tests.support.sinks import RecordingSink

# A factory returns a new *writer* (an ingress instance) sharing the backend's counters.
WriterFactory = Callable[[], StatsStore]


@pytest.fixture(params=["memory", "redis", "firestore"])
def writers(request: pytest.FixtureRequest, unique: str) -> Iterator[WriterFactory]:
    if request.param == "memory":
        shared = MemoryStatsStore()
        yield lambda: shared  # one process: every "instance" is the same store
    elif request.param == "redis":
        url = request.getfixturevalue("redis_url")
        client = redis.Redis.from_url(url)
        yield lambda: RedisStatsStore(client, prefix=f"test:{unique}:")
        client.close()
    else:
        request.getfixturevalue("firestore_emulator")
        client = firestore.Client(project=request.getfixturevalue("project_id"))
        yield lambda: FirestoreStatsStore(client)


def test_totals_sum_every_writer_and_keep_odd_names(writers: WriterFactory) -> None:
    a, b = writers(), writers()
    assert a.totals() == {}
    a.add({"deliveries": 3, "duplicate": 1, "dead_lettered.invalid_delay_seconds": 1})
    b.add({"deliveries": 2})
    a.add({})  # nothing to write
    a.add({"deliveries": 1})
    assert writers().totals() == {
        "deliveries": 6,
        "duplicate": 1,
        "dead_lettered.invalid_delay_seconds": 1,
    }


def test_concurrent_writers_lose_nothing(writers: WriterFactory) -> None:
    stores = [writers() for _ in range(4)]

    def write(store: StatsStore) -> None:
        for _ in range(10):
            store.add({"deliveries": 1, "duplicate": 2})

    threads = [threading.Thread(target=write, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert writers().totals() == {"deliveries": 40, "duplicate": 80}


def test_minute_buckets_sum_every_writer_minute_by_minute(writers: WriterFactory) -> None:
    a, b = writers(), writers()
    t = datetime(2030, 1, 1, 12, 0, 10, tzinfo=UTC)
    first, second = datetime(2030, 1, 1, 12, 0, tzinfo=UTC), datetime(2030, 1, 1, 12, 1, tzinfo=UTC)
    a.add({"deliveries": 2}, {"deliveries": 2, "delay_lateness_seconds.bucket.3": 1}, minute=t)
    b.add({"deliveries": 1}, minute=t + timedelta(seconds=30))  # the same minute, another writer
    a.add({"duplicate": 1}, minute=t + timedelta(minutes=1))
    a.add({"deliveries": 5})  # the totals only
    a.add({}, {"delay_lateness_seconds.bucket.4": 2}, minute=t + timedelta(minutes=1))
    reader = writers()
    assert reader.minutes(t - timedelta(minutes=59), t + timedelta(minutes=1)) == {
        first: {"deliveries": 3, "delay_lateness_seconds.bucket.3": 1},
        second: {"duplicate": 1, "delay_lateness_seconds.bucket.4": 2},
    }
    assert reader.minutes(second, second + timedelta(minutes=5)) == {
        second: {"duplicate": 1, "delay_lateness_seconds.bucket.4": 2}
    }
    assert reader.minutes(first - timedelta(hours=1), first - timedelta(minutes=1)) == {}
    assert reader.totals() == {"deliveries": 8, "duplicate": 1}


def test_redis_minute_hashes_expire(redis_url: str, unique: str) -> None:
    client = redis.Redis.from_url(redis_url)
    store = RedisStatsStore(client, prefix=f"test:{unique}:")
    now = datetime.now(UTC)
    store.add({"deliveries": 1}, minute=now)
    ttl = client.ttl(store.minute_hash(now))
    assert 0 < ttl <= 90 * 60  # SERIES_RETENTION after the minute's start
    assert client.ttl(store.key) == -1  # the totals hash never expires
    client.close()


def test_firestore_minute_documents_carry_their_expiry(
    firestore_emulator: str, project_id: str
) -> None:
    client = firestore.Client(project=project_id)
    minute = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
    FirestoreStatsStore(client, instance="a").add({"deliveries": 1}, minute=minute)
    FirestoreStatsStore(client, instance="a").add({"deliveries": 2}, minute=minute)
    minutes = client.collection("pubsub_toolkit_stats/ingress/pubsub_toolkit_stats_minutes")
    docs = {d.id: d.to_dict() for d in minutes.stream()}
    assert set(docs) == {"203001011200-a"}
    assert docs["203001011200-a"]["counts"] == {"deliveries": 3}
    assert docs["203001011200-a"]["expire_at"] == minute + timedelta(minutes=90)


def test_firestore_writes_one_document_per_instance(
    firestore_emulator: str, project_id: str
) -> None:
    client = firestore.Client(project=project_id)
    FirestoreStatsStore(client, instance="a").add({"deliveries": 1})
    FirestoreStatsStore(client, instance="a").add({"deliveries": 1})
    FirestoreStatsStore(client, instance="b").add({"deliveries": 1})
    docs = {d.id: d.to_dict() for d in client.collection("pubsub_toolkit_stats").stream()}
    assert set(docs) == {"ingress-a", "ingress-b"}
    assert docs["ingress-a"]["counts"] == {"deliveries": 2}
    assert docs["ingress-a"]["expire_at"] > docs["ingress-a"]["updated_at"]


class _WritesByThread(RedisStatsStore):
    """A RedisStatsStore that notes the thread of each write (our own protocol, a real server)."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        super().__init__(client, prefix=prefix)
        self.writers: list[str] = []

    def add(
        self,
        deltas: Mapping[str, int],
        per_minute: Mapping[str, int] | None = None,
        *,
        minute: datetime | None = None,
    ) -> None:
        self.writers.append(threading.current_thread().name)
        super().add(deltas, per_minute, minute=minute)


def test_flushing_does_not_slow_ingress(
    redis_url: str, unique: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ingress (Redis dedup, in-memory sink, 8 threads) with and without a flusher writing to
    Redis every 50 ms - a hundred times the default rate. What keeps ingress fast is checked
    exactly: an ingress thread never writes the stats store (it only counts in memory), every
    write is the flusher's own or its final flush, and the counts add up. The throughputs of
    alternating rounds are printed, not asserted: tests never fail on timing (a shared machine
    moved this ratio from 0.70 to 1.2 between runs)."""
    client = redis.Redis.from_url(redis_url)
    rates: dict[str, list[float]] = {"without": [], "with": []}
    for round_no in range(6):
        for variant in ("without", "with"):
            ingress = Ingress(
                store=RedisDedupStore(client, prefix=f"bench:{unique}:{round_no}:{variant}:"),
                sink=RecordingSink(),
                final_topic="projects/p/topics/final",
                dead_letter_topic="projects/p/topics/dead-letter",
                lease=timedelta(seconds=60),
                ttl=timedelta(minutes=5),
            )
            flusher, stats = None, None
            if variant == "with":
                stats = _WritesByThread(client, prefix=f"stats:{unique}:")
                flusher = CounterFlusher(ingress.metrics, stats, interval=0.05).start()
            messages = [
                Message(b"x", {"dedup_key": f"k{i % 800}"}, message_id=str(i)) for i in range(1000)
            ]
            started = time.perf_counter()
            with ThreadPoolExecutor(8, thread_name_prefix="ingress") as pool:
                list(pool.map(ingress.handle, messages))
            rates[variant].append(len(messages) / (time.perf_counter() - started))
            if flusher is not None and stats is not None:
                flusher.stop()
                assert stats.writers, "the flusher wrote nothing"
                assert not [w for w in stats.writers if w.startswith("ingress")], stats.writers
                assert RedisStatsStore(client, prefix=f"stats:{unique}:").totals()[
                    "deliveries"
                ] == 1000 * (len(rates["with"]))
    client.close()
    ratio = statistics.median(rates["with"]) / statistics.median(rates["without"])
    with capsys.disabled():
        print(
            "\nstats flush overhead:",
            json.dumps({k: [round(r) for r in v] for k, v in rates.items()}),
            f"ratio {ratio:.2f}",
        )
