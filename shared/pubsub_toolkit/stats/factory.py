"""Build the stats store on the same backend as the dedup records."""

from __future__ import annotations

from pubsub_toolkit.config import Settings
from pubsub_toolkit.stats.store import INGRESS_SCOPE, StatsStore


def stats_store_from_settings(settings: Settings, *, scope: str = INGRESS_SCOPE) -> StatsStore:
    """The stats store on ``settings.dedup_backend`` (memory, Redis or Firestore)."""
    if settings.dedup_backend == "memory":
        from pubsub_toolkit.stats.memory import MemoryStatsStore

        return MemoryStatsStore()
    if settings.dedup_backend == "redis":
        from pubsub_toolkit.stats.redis import RedisStatsStore

        assert settings.redis_url is not None  # Settings.from_env requires it for redis
        return RedisStatsStore.from_url(settings.redis_url, scope=scope)
    from google.cloud import firestore

    from pubsub_toolkit.stats.firestore import FirestoreStatsStore

    client = firestore.Client(project=settings.project, database=settings.firestore_database)
    return FirestoreStatsStore(client, scope=scope)
