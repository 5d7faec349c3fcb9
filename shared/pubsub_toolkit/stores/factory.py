"""Build every store on the configured backend: one backend for dedup records, FIFO state,
sequence counters and stats.

Backends are imported here only when selected, so the memory and Firestore backends work
without the ``redis`` extra; the Redis modules themselves say which extra to install.
"""

from __future__ import annotations

import os
import tempfile
import threading
import urllib.parse
from typing import TYPE_CHECKING

from pubsub_toolkit._secrets import SecretReader, read_secret_manager
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


_secret_lock = threading.Lock()
_resolved_urls: dict[tuple[str | None, str | None, str | None], str] = {}


def redis_url_from_settings(settings: Settings, *, read_secret: SecretReader | None = None) -> str:
    """The URL every Redis store of ``settings`` connects to.

    REDIS_URL as it is, or REDIS_URL_SECRET's payload; with REDIS_CA_CERT_SECRET the server
    CA (a PEM) is written to a private temporary file and named in the URL's
    ``ssl_ca_certs`` argument, which redis-py passes to its TLS connection. Secrets are read
    once per process: the four stores of a function instance share one read.
    """
    if settings.redis_url is None and settings.redis_url_secret is None:
        raise ConfigurationError(
            "REDIS_URL (or REDIS_URL_SECRET) is required for STORE_BACKEND=redis"
        )
    cache_key = (settings.redis_url, settings.redis_url_secret, settings.redis_ca_cert_secret)
    with _secret_lock:
        if cache_key not in _resolved_urls:
            reader = read_secret or read_secret_manager
            _resolved_urls[cache_key] = _resolve_redis_url(settings, reader)
        return _resolved_urls[cache_key]


def _resolve_redis_url(settings: Settings, read_secret: SecretReader) -> str:
    if settings.redis_url_secret is not None:
        url = read_secret(settings.redis_url_secret).decode().strip()
        source = "REDIS_URL_SECRET"
    else:
        url = settings.redis_url or ""
        source = "REDIS_URL"
    if not url.startswith(("redis://", "rediss://", "unix://")):
        # Never echo the value: it carries the AUTH string.
        raise ConfigurationError(f"{source} does not hold a redis:// or rediss:// URL")
    if settings.redis_ca_cert_secret is None:
        return url
    if not url.startswith("rediss://"):
        raise ConfigurationError(
            f"REDIS_CA_CERT_SECRET is set but {source} is not a rediss:// (TLS) URL"
        )
    pem = read_secret(settings.redis_ca_cert_secret)
    if b"-----BEGIN CERTIFICATE-----" not in pem:
        raise ConfigurationError(
            f"REDIS_CA_CERT_SECRET ({settings.redis_ca_cert_secret}) holds no PEM certificate"
        )
    fd, path = tempfile.mkstemp(prefix="pubsub-toolkit-redis-ca-", suffix=".pem")
    with os.fdopen(fd, "wb") as out:
        out.write(pem)
    separator = "&" if urllib.parse.urlsplit(url).query else "?"
    return f"{url}{separator}{urllib.parse.urlencode({'ssl_ca_certs': path})}"


def _redis_url(settings: Settings) -> str:
    return redis_url_from_settings(settings)


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
