"""Build each dedup backend against the real servers the session fixtures started."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from google.cloud import firestore

from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.stores.dedup.base import DedupStore
from pubsub_toolkit.stores.dedup.firestore import FirestoreDedupStore
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from pubsub_toolkit.stores.dedup.redis import RedisDedupStore

BACKENDS = ("memory", "redis", "firestore")
StoreFactory = Callable[..., DedupStore]


def store_factory(request: pytest.FixtureRequest, backend: str) -> StoreFactory:
    """A function ``make(clock=...)`` returning a fresh, isolated store of ``backend``.

    Every store made by one factory shares the same backing data (same Redis prefix, same
    Firestore project), like several workers of one deployment.
    """
    suffix = uuid.uuid4().hex[:12]
    if backend == "memory":
        shared: dict[str, MemoryDedupStore] = {}

        def make_memory(clock: Clock = SYSTEM_CLOCK) -> DedupStore:
            # One in-memory store per factory: "workers" share it, as they would share Redis.
            if "store" not in shared:
                shared["store"] = MemoryDedupStore(clock)
            return shared["store"]

        return make_memory
    if backend == "redis":
        url = request.getfixturevalue("redis_url")

        def make_redis(clock: Clock = SYSTEM_CLOCK) -> DedupStore:
            return RedisDedupStore.from_url(url, prefix=f"test-{suffix}:", clock=clock)

        return make_redis
    if backend == "firestore":
        request.getfixturevalue("firestore_emulator")
        client = firestore.Client(project=f"test-{suffix}")

        def make_firestore(clock: Clock = SYSTEM_CLOCK) -> DedupStore:
            return FirestoreDedupStore(client, clock=clock)

        return make_firestore
    raise ValueError(backend)
