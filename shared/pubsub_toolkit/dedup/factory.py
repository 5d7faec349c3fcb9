"""Build the configured dedup store; optional backends are imported only when selected."""

from __future__ import annotations

from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.config import Settings
from pubsub_toolkit.dedup.store import DedupStore
from pubsub_toolkit.errors import ConfigurationError


def store_from_settings(settings: Settings, *, clock: Clock = SYSTEM_CLOCK) -> DedupStore:
    """The store ``settings.dedup_backend`` names, with a client created once."""
    if settings.dedup_backend == "memory":
        from pubsub_toolkit.dedup.memory import MemoryDedupStore

        return MemoryDedupStore(clock)
    if settings.dedup_backend == "redis":
        from pubsub_toolkit.dedup.redis import RedisDedupStore

        if settings.redis_url is None:
            raise ConfigurationError("REDIS_URL is required when DEDUP_BACKEND=redis")
        return RedisDedupStore.from_url(settings.redis_url, clock=clock)
    from google.cloud import firestore

    from pubsub_toolkit.dedup.firestore import FirestoreDedupStore

    client = firestore.Client(project=settings.project, database=settings.firestore_database)
    return FirestoreDedupStore(client, collection=settings.dedup_collection, clock=clock)
