"""Build every store on the configured backend: one backend for dedup records, FIFO state,
sequence counters and stats.

Backends are imported here only when selected, so the memory and Firestore backends work
without the ``redis`` extra; the Redis modules themselves say which extra to install.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.config import Settings
from pubsub_toolkit.errors import ConfigurationError
from pubsub_toolkit.stores.stats.base import INGRESS_SCOPE

if TYPE_CHECKING:
    from google.cloud import firestore

    from pubsub_toolkit.stores.counters.base import SequenceCounter
    from pubsub_toolkit.stores.dedup.base import DedupStore
    from pubsub_toolkit.stores.fifo_state.base import FifoStore
    from pubsub_toolkit.stores.stats.base import StatsStore


def _redis_url(settings: Settings) -> str:
    if settings.redis_url is None:  # Settings.from_env requires it for redis
        raise ConfigurationError("REDIS_URL is required when STORE_BACKEND=redis")
    return settings.redis_url


def _firestore_client(settings: Settings) -> firestore.Client:
    from google.cloud import firestore

    return firestore.Client(project=settings.project, database=settings.firestore_database)


def dedup_store_from_settings(settings: Settings, *, clock: Clock = SYSTEM_CLOCK) -> DedupStore:
    """The dedup store ``settings.store_backend`` names, with a client created once."""
    if settings.store_backend == "memory":
        from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore

        return MemoryDedupStore(clock)
    if settings.store_backend == "redis":
        from pubsub_toolkit.stores.dedup.redis import RedisDedupStore

        return RedisDedupStore.from_url(_redis_url(settings), clock=clock)
    from pubsub_toolkit.stores.dedup.firestore import FirestoreDedupStore

    return FirestoreDedupStore(
        _firestore_client(settings), collection=settings.dedup_collection, clock=clock
    )


def fifo_store_from_settings(settings: Settings) -> FifoStore:
    """The FIFO gate's state store on ``settings.store_backend``."""
    if settings.store_backend == "memory":
        from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore

        return MemoryFifoStore()
    if settings.store_backend == "redis":
        from pubsub_toolkit.stores.fifo_state.redis import RedisFifoStore

        return RedisFifoStore.from_url(_redis_url(settings))
    from pubsub_toolkit.stores.fifo_state.firestore import FirestoreFifoStore

    return FirestoreFifoStore(_firestore_client(settings))


def counter_from_settings(settings: Settings) -> SequenceCounter:
    """The sequence counter (the producer side of FIFO) on ``settings.store_backend``."""
    if settings.store_backend == "memory":
        from pubsub_toolkit.stores.counters.memory import MemorySequenceCounter

        return MemorySequenceCounter()
    if settings.store_backend == "redis":
        from pubsub_toolkit.stores.counters.redis import RedisSequenceCounter

        return RedisSequenceCounter.from_url(_redis_url(settings))
    from pubsub_toolkit.stores.counters.firestore import FirestoreSequenceCounter

    return FirestoreSequenceCounter(_firestore_client(settings))


def stats_store_from_settings(settings: Settings, *, scope: str = INGRESS_SCOPE) -> StatsStore:
    """The stats store (the dashboard's counters) on ``settings.store_backend``."""
    if settings.store_backend == "memory":
        from pubsub_toolkit.stores.stats.memory import MemoryStatsStore

        return MemoryStatsStore()
    if settings.store_backend == "redis":
        from pubsub_toolkit.stores.stats.redis import RedisStatsStore

        return RedisStatsStore.from_url(_redis_url(settings), scope=scope)
    from pubsub_toolkit.stores.stats.firestore import FirestoreStatsStore

    return FirestoreStatsStore(_firestore_client(settings), scope=scope)
