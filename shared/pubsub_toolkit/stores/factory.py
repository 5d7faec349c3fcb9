"""Build the configured stores from settings: one backend, on one client, for dedup
records, FIFO state, sequence counters and stats - for sync code and for asyncio.

:func:`backend_from_settings` is the one place settings become a backend; the ``*_from_settings``
functions are thin wrappers over it for callers that need one store.
:func:`async_stores_from_settings` makes the asyncio path's two stores from the same settings the
same way: the Redis URL resolved by :func:`redis_url_from_settings`
(``PUBSUB_TOOLKIT_REDIS_URL_SECRET`` and ``PUBSUB_TOOLKIT_REDIS_CA_CERT_SECRET`` included), a
cluster node refused for the FIFO gate store at configuration, Firestore in ``settings.project`` and
``settings.firestore_database``. :func:`store_names_from_settings` is the one place the stores'
collections and Redis key prefixes are named from settings (``PUBSUB_TOOLKIT_STORE_PREFIX`` in
front of each), for the sync and the asyncio path alike. Backends are imported here only when
selected, so the memory and
Firestore backends work without the ``redis`` extra; the Redis modules themselves say which extra to
install.
"""

from __future__ import annotations

import os
import tempfile
import threading
import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from pubsub_toolkit._secrets import SecretReader, read_secret_manager
from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.config import DEFAULT_DEDUP_COLLECTION, Settings
from pubsub_toolkit.errors import ConfigurationError
from pubsub_toolkit.stores.backends.base import StoreNames
from pubsub_toolkit.stores.stats.base import INGRESS_SCOPE

if TYPE_CHECKING:
    from pubsub_toolkit.stores.backends.base import Backend
    from pubsub_toolkit.stores.counters.base import SequenceCounter
    from pubsub_toolkit.stores.dedup.base import AsyncDedupStore, DedupStore
    from pubsub_toolkit.stores.fifo_state.base import AsyncFifoStore, FifoStore
    from pubsub_toolkit.stores.stats.base import StatsStore


_secret_lock = threading.Lock()
_resolved_urls: dict[tuple[str | None, str | None, str | None], str] = {}


def redis_url_from_settings(settings: Settings, *, read_secret: SecretReader | None = None) -> str:
    """The URL every Redis store of ``settings`` connects to.

    PUBSUB_TOOLKIT_REDIS_URL as it is, or PUBSUB_TOOLKIT_REDIS_URL_SECRET's payload; with
    PUBSUB_TOOLKIT_REDIS_CA_CERT_SECRET the server CA (a PEM) is written to a private temporary file
    and named in the URL's ``ssl_ca_certs`` argument, which redis-py passes to its TLS connection.
    Secrets are read once per process: the four stores of a function instance share one read.
    """
    if settings.redis_url is None and settings.redis_url_secret is None:
        raise ConfigurationError(
            "redis_url or redis_url_secret (PUBSUB_TOOLKIT_REDIS_URL or "
            "PUBSUB_TOOLKIT_REDIS_URL_SECRET) is required for the "
            "Redis backend"
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
        source = "PUBSUB_TOOLKIT_REDIS_URL_SECRET"
    else:
        url = settings.redis_url or ""
        source = "PUBSUB_TOOLKIT_REDIS_URL"
    if not url.startswith(("redis://", "rediss://", "unix://")):
        # Never echo the value: it carries the AUTH string.
        raise ConfigurationError(f"{source} does not hold a redis:// or rediss:// URL")
    if settings.redis_ca_cert_secret is None:
        return url
    if not url.startswith("rediss://"):
        raise ConfigurationError(
            f"PUBSUB_TOOLKIT_REDIS_CA_CERT_SECRET is set but {source} is not a rediss:// (TLS) URL"
        )
    pem = read_secret(settings.redis_ca_cert_secret)
    if b"-----BEGIN CERTIFICATE-----" not in pem:
        raise ConfigurationError(
            f"PUBSUB_TOOLKIT_REDIS_CA_CERT_SECRET ({settings.redis_ca_cert_secret}) holds no PEM "
            "certificate"
        )
    fd, path = tempfile.mkstemp(prefix="pubsub-toolkit-redis-ca-", suffix=".pem")
    with os.fdopen(fd, "wb") as out:
        out.write(pem)
    separator = "&" if urllib.parse.urlsplit(url).query else "?"
    return f"{url}{separator}{urllib.parse.urlencode({'ssl_ca_certs': path})}"


def store_names_from_settings(settings: Settings) -> StoreNames:
    """Every collection and Redis key prefix of the stores: ``settings.store_prefix`` in front
    of each default name, except a ``dedup_collection`` other than the default, which is the
    dedup collection as it is (Redis keys get the prefix all the same)."""
    explicit = settings.dedup_collection != DEFAULT_DEDUP_COLLECTION
    return StoreNames.prefixed(
        settings.store_prefix, dedup_collection=settings.dedup_collection if explicit else None
    )


def backend_from_settings(settings: Settings, *, clock: Clock = SYSTEM_CLOCK) -> Backend:
    """The backend ``settings.store_backend`` names, on one client every store it makes
    shares: Redis at :func:`redis_url_from_settings`, Firestore in ``settings.project`` and
    ``settings.firestore_database``, or memory; its stores use the names of
    :func:`store_names_from_settings`. Only the selected backend is imported."""
    if settings.store_backend == "memory":
        from pubsub_toolkit.stores.backends.memory import MemoryBackend

        return MemoryBackend(clock=clock)
    names = store_names_from_settings(settings)
    if settings.store_backend == "redis":
        from pubsub_toolkit.stores.backends.redis import RedisBackend

        return RedisBackend.from_url(redis_url_from_settings(settings), clock=clock, names=names)
    from pubsub_toolkit.stores.backends.firestore import FirestoreBackend

    return FirestoreBackend(
        project=settings.project,
        database=settings.firestore_database,
        names=names,
        clock=clock,
    )


# One store each, on a backend of its own (a new client per call, as before backends). A
# process that needs several stores makes one backend with backend_from_settings instead.


def dedup_store_from_settings(settings: Settings, *, clock: Clock = SYSTEM_CLOCK) -> DedupStore:
    """The dedup store ``settings.store_backend`` names."""
    return backend_from_settings(settings, clock=clock).dedup_store()


def fifo_store_from_settings(settings: Settings) -> FifoStore:
    """The FIFO gate's state store on ``settings.store_backend``."""
    return backend_from_settings(settings).fifo_store()


def counter_from_settings(settings: Settings) -> SequenceCounter:
    """The sequence counter (the producer side of FIFO) on ``settings.store_backend``; on Redis
    it expires ``DEDUP_TTL`` after its last reservation, never after the group state it numbers
    (an idle group then starts again at 1 in a new epoch instead of waiting for a lost #1)."""
    backend = backend_from_settings(settings)
    if settings.store_backend == "redis":
        from pubsub_toolkit.stores.backends.redis import RedisBackend

        return cast(RedisBackend, backend).counter(ttl=settings.dedup_ttl)
    return backend.counter()


def stats_store_from_settings(settings: Settings, *, scope: str = INGRESS_SCOPE) -> StatsStore:
    """The stats store (the dashboard's counters) on ``settings.store_backend``."""
    return backend_from_settings(settings).stats_store(scope=scope)


@dataclass(frozen=True)
class AsyncStores:
    """The asyncio path's stores, on one client (``None`` for memory) that the caller closes
    on the loop that used it (``aclose``)."""

    dedup: AsyncDedupStore
    fifo: AsyncFifoStore
    client: Any


def async_stores_from_settings(settings: Settings, *, clock: Clock = SYSTEM_CLOCK) -> AsyncStores:
    """The async dedup and FIFO stores of ``settings.store_backend``, configured exactly as
    :func:`backend_from_settings` configures the sync ones (a Redis Cluster is refused with the
    same ConfigurationError, before any message), on the same names. Only the selected backend
    is imported."""
    names = store_names_from_settings(settings)
    if settings.store_backend == "redis":
        from pubsub_toolkit.stores.dedup.redis_async import AsyncRedisDedupStore, connect_async
        from pubsub_toolkit.stores.fifo_state.redis_async import AsyncRedisFifoStore

        client = connect_async(
            redis_url_from_settings(settings), needed_by="the async Redis stores"
        )
        # The FIFO store refuses a cluster client (ConfigurationError), as the sync one does.
        fifo = AsyncRedisFifoStore(client, prefix=names.fifo_state_key_prefix)
        return AsyncStores(
            AsyncRedisDedupStore(client, prefix=names.dedup_key_prefix, clock=clock), fifo, client
        )
    if settings.store_backend == "firestore":
        from google.cloud import firestore

        from pubsub_toolkit.stores.dedup.firestore_async import AsyncFirestoreDedupStore
        from pubsub_toolkit.stores.fifo_state.firestore_async import AsyncFirestoreFifoStore

        client = firestore.AsyncClient(
            project=settings.project, database=settings.firestore_database
        )
        return AsyncStores(
            AsyncFirestoreDedupStore(client, collection=names.dedup_collection, clock=clock),
            AsyncFirestoreFifoStore(client, collection=names.fifo_state_collection),
            client,
        )
    from pubsub_toolkit.stores.dedup.memory import AsyncMemoryDedupStore
    from pubsub_toolkit.stores.fifo_state.memory import AsyncMemoryFifoStore

    return AsyncStores(AsyncMemoryDedupStore(clock), AsyncMemoryFifoStore(clock), None)
