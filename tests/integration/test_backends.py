"""A backend makes every store on one client: a real redis-server and the Firestore emulator.

One process that dedups, gates FIFO groups, numbers messages and counts stats should hold one
Redis connection pool (or one Firestore client), not four. These tests show the stores a
backend makes share its client object, and, on Redis, that the server sees one connection for
all four where four ``from_url`` stores open four.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
import redis
from google.cloud import firestore

from pubsub_toolkit.config import Settings
from pubsub_toolkit.stores import factory
from pubsub_toolkit.stores.backends.base import Backend
from pubsub_toolkit.stores.backends.firestore import FirestoreBackend
from pubsub_toolkit.stores.backends.redis import RedisBackend
from pubsub_toolkit.stores.counters.redis import RedisSequenceCounter
from pubsub_toolkit.stores.dedup.base import ClaimStatus, DedupStore
from pubsub_toolkit.stores.dedup.redis import RedisDedupStore
from pubsub_toolkit.stores.fifo_state.base import GroupState
from pubsub_toolkit.stores.fifo_state.redis import RedisFifoStore
from pubsub_toolkit.stores.stats.redis import RedisStatsStore

LEASE = timedelta(seconds=30)
TTL = timedelta(hours=1)


def named_url(redis_url: str, name: str) -> str:
    """``redis_url`` whose connections call themselves ``name`` (CLIENT SETNAME on connect)."""
    return f"{redis_url}?client_name={name}"


def connections_named(observer: redis.Redis, name: str) -> int:
    return sum(1 for client in observer.client_list() if client.get("name") == name)


@pytest.fixture
def observer(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def exercise(backend: Backend, unique: str) -> None:
    """Use each of the four stores once, so each has taken a connection if it had its own."""
    dedup = backend.dedup_store()
    assert dedup.claim("ns", unique, "fp", lease=LEASE, ttl=TTL).status is ClaimStatus.ACQUIRED
    fifo = backend.fifo_store()
    assert fifo.save(f"c-{unique}", "g", GroupState(last_processed=1), GroupState())
    assert fifo.load(f"c-{unique}", "g").last_processed == 1
    counter = backend.counter()
    assert list(counter.reserve(f"g-{unique}", 2).numbers()) == [1, 2]
    stats = backend.stats_store(scope=f"s-{unique}")
    stats.add({"published": 3})
    assert stats.totals() == {"published": 3}


def test_a_redis_backend_makes_every_store_on_one_client_and_one_connection(
    redis_url: str, observer: redis.Redis, unique: str
) -> None:
    name = f"backend-{unique}"
    backend = RedisBackend.from_url(named_url(redis_url, name))
    stores = [
        backend.dedup_store(),
        backend.fifo_store(),
        backend.counter(),
        backend.stats_store(),
    ]
    assert [type(s) for s in stores] == [
        RedisDedupStore,
        RedisFifoStore,
        RedisSequenceCounter,
        RedisStatsStore,
    ]
    assert all(store._client is backend.client for store in stores)
    exercise(backend, unique)
    # Four stores used one after another: one pooled connection on the server.
    assert connections_named(observer, name) == 1
    backend.close()
    assert connections_named(observer, name) == 0  # from_url made the client: close closes it


def test_separate_from_url_stores_open_a_connection_each(
    redis_url: str, observer: redis.Redis, unique: str
) -> None:
    """The contrast that makes the test above mean something: four stores, four clients."""
    name = f"separate-{unique}"
    url = named_url(redis_url, name)
    dedup = RedisDedupStore.from_url(url)
    dedup.claim("ns", unique, "fp", lease=LEASE, ttl=TTL)
    fifo = RedisFifoStore.from_url(url)
    fifo.load(f"c-{unique}", "g")
    counter = RedisSequenceCounter.from_url(url)
    counter.reserve(f"g-{unique}")
    stats = RedisStatsStore.from_url(url, scope=f"s-{unique}")
    stats.totals()
    assert connections_named(observer, name) == 4
    for store in (dedup, fifo, counter, stats):
        store._client.close()


def test_a_redis_backend_on_your_client_leaves_it_open(redis_url: str, unique: str) -> None:
    client = redis.Redis.from_url(redis_url)
    backend = RedisBackend(client)
    exercise(backend, unique)
    assert backend.fifo_store()._client is client
    backend.close()
    assert client.ping()  # still the caller's to close
    client.close()


def test_backend_from_settings_is_what_the_factory_functions_use(
    redis_url: str, observer: redis.Redis, unique: str
) -> None:
    name = f"settings-{unique}"
    settings = Settings(
        project="p",
        final_topic="final",
        dead_letter_topic="dlq",
        store_backend="redis",
        redis_url=named_url(redis_url, name),
    )
    backend = factory.backend_from_settings(settings)
    assert isinstance(backend, RedisBackend)
    exercise(backend, unique)
    assert connections_named(observer, name) == 1
    backend.close()
    # The single-store functions still build the same kinds of store (each on its own client).
    store = factory.dedup_store_from_settings(settings)
    assert isinstance(store, RedisDedupStore)
    assert store.claim("ns", unique, "fp", lease=LEASE, ttl=TTL).status is ClaimStatus.IN_PROGRESS
    store._client.close()


def test_a_firestore_backend_makes_every_store_on_one_client(
    firestore_emulator: str, project_id: str, unique: str
) -> None:
    backend = FirestoreBackend(project=project_id, dedup_collection=f"dedup-{unique}")
    assert backend.client.project == project_id  # None: a client made for the project
    stores = [
        backend.dedup_store(),
        backend.fifo_store(),
        backend.counter(),
        backend.stats_store(),
    ]
    assert all(store._client is backend.client for store in stores)
    exercise(backend, unique)
    # The dedup records went to the collection the backend was given.
    ids = [doc.id for doc in backend.client.collection(f"dedup-{unique}").stream()]
    assert len(ids) == 1
    backend.close()


def test_a_firestore_backend_on_your_client_and_from_settings(
    firestore_emulator: str, project_id: str, unique: str
) -> None:
    client = firestore.Client(project=project_id)
    mine = FirestoreBackend(client)
    assert mine.dedup_store()._client is client
    mine.close()
    assert list(client.collection("anything").limit(1).stream()) == []  # still usable
    settings = Settings(
        project=project_id,
        final_topic="final",
        dead_letter_topic="dlq",
        dedup_collection=f"dedup-{unique}",
    )
    backend = factory.backend_from_settings(settings)
    assert isinstance(backend, FirestoreBackend)
    assert (backend.client.project, backend.dedup_collection) == (project_id, f"dedup-{unique}")
    # A record one backend claimed is in progress for a store from the factory function.
    first: DedupStore = backend.dedup_store()
    assert first.claim("ns", unique, "fp", lease=LEASE, ttl=TTL).status is ClaimStatus.ACQUIRED
    second = factory.dedup_store_from_settings(settings)
    assert second.claim("ns", unique, "fp", lease=LEASE, ttl=TTL).status is ClaimStatus.IN_PROGRESS
    backend.close()
