"""The memory backend and the backend protocol; Redis and Firestore run in tests/integration."""

from __future__ import annotations

from datetime import timedelta

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.config import Settings
from pubsub_toolkit.stores.backends.base import Backend
from pubsub_toolkit.stores.backends.firestore import FirestoreBackend
from pubsub_toolkit.stores.backends.memory import MemoryBackend
from pubsub_toolkit.stores.backends.redis import RedisBackend
from pubsub_toolkit.stores.dedup.base import ClaimStatus
from pubsub_toolkit.stores.factory import (
    backend_from_settings,
    counter_from_settings,
    dedup_store_from_settings,
)

LEASE = timedelta(seconds=30)
TTL = timedelta(hours=1)
MEMORY = Settings(project="p", final_topic="t", dead_letter_topic="d", store_backend="memory")


def test_every_backend_class_has_the_protocols_methods() -> None:
    for cls in (MemoryBackend, RedisBackend, FirestoreBackend):
        for method in ("dedup_store", "fifo_store", "counter", "stats_store", "close"):
            assert callable(getattr(cls, method)), (cls, method)
    assert isinstance(MemoryBackend(), Backend)


def test_stores_of_one_memory_backend_share_its_records() -> None:
    backend = MemoryBackend()
    first, second = backend.dedup_store(), backend.dedup_store()
    assert first.claim("ns", "k", "fp", lease=LEASE, ttl=TTL).status is ClaimStatus.ACQUIRED
    assert second.claim("ns", "k", "fp", lease=LEASE, ttl=TTL).status is ClaimStatus.IN_PROGRESS
    assert list(backend.counter().reserve("g").numbers()) == [1]
    assert list(backend.counter().reserve("g").numbers()) == [2]
    backend.stats_store(scope="a").add({"n": 1})
    assert backend.stats_store(scope="a").totals() == {"n": 1}
    assert backend.stats_store(scope="b").totals() == {}
    assert backend.fifo_store() is backend.fifo_store()


def test_a_memory_backend_uses_its_clock() -> None:
    clock = ManualClock()
    store = MemoryBackend(clock=clock).dedup_store()
    assert store.claim("ns", "k", "fp", lease=LEASE, ttl=TTL).status is ClaimStatus.ACQUIRED
    assert store.claim("ns", "k", "fp", lease=LEASE, ttl=TTL).status is ClaimStatus.IN_PROGRESS
    clock.advance(LEASE * 2)  # on this clock the lease ran out: another worker may take over
    assert store.claim("ns", "k", "fp", lease=LEASE, ttl=TTL).status is ClaimStatus.TAKEN_OVER


def test_backend_from_settings_memory_and_the_wrappers() -> None:
    backend = backend_from_settings(MEMORY)
    assert isinstance(backend, MemoryBackend)
    # Each single-store function makes a backend of its own: fresh memory, as before.
    one, two = dedup_store_from_settings(MEMORY), dedup_store_from_settings(MEMORY)
    assert one.claim("ns", "k", "fp", lease=LEASE, ttl=TTL).status is ClaimStatus.ACQUIRED
    assert two.claim("ns", "k", "fp", lease=LEASE, ttl=TTL).status is ClaimStatus.ACQUIRED
    assert list(counter_from_settings(MEMORY).reserve("g").numbers()) == [1]
