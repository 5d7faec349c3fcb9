"""Build the FIFO stores (gate state, sequence counter) on the configured backend."""

from __future__ import annotations

from pubsub_toolkit.config import Settings
from pubsub_toolkit.fifo.counter import SequenceCounter
from pubsub_toolkit.fifo.state import FifoStore


def fifo_store_from_settings(settings: Settings) -> FifoStore:
    """The gate-state store on ``settings.dedup_backend`` (one backend for all records)."""
    if settings.dedup_backend == "memory":
        from pubsub_toolkit.fifo.memory_state import MemoryFifoStore

        return MemoryFifoStore()
    if settings.dedup_backend == "redis":
        from pubsub_toolkit.fifo.redis_state import RedisFifoStore

        assert settings.redis_url is not None  # Settings.from_env requires it for redis
        return RedisFifoStore.from_url(settings.redis_url)
    from google.cloud import firestore

    from pubsub_toolkit.fifo.firestore_state import FirestoreFifoStore

    client = firestore.Client(project=settings.project, database=settings.firestore_database)
    return FirestoreFifoStore(client)


def counter_from_settings(settings: Settings) -> SequenceCounter:
    """The sequence counter (publisher side) on ``settings.dedup_backend``."""
    if settings.dedup_backend == "memory":
        from pubsub_toolkit.fifo.memory_counter import MemorySequenceCounter

        return MemorySequenceCounter()
    if settings.dedup_backend == "redis":
        from pubsub_toolkit.fifo.redis_counter import RedisSequenceCounter

        assert settings.redis_url is not None
        return RedisSequenceCounter.from_url(settings.redis_url)
    from google.cloud import firestore

    from pubsub_toolkit.fifo.firestore_counter import FirestoreSequenceCounter

    client = firestore.Client(project=settings.project, database=settings.firestore_database)
    return FirestoreSequenceCounter(client)
