"""The Redis (Memorystore) backend: every store on one redis-py client and its connection pool.

:meth:`RedisBackend.from_url` connects as the stores' own ``from_url`` do - short timeouts, and
a ``redis.cluster.RedisCluster`` client when the server is a cluster node (see
:mod:`pubsub_toolkit.stores._redis_calls`). On a cluster the dedup store, the sequence counter
and the stats store (one key per operation) work; :meth:`RedisBackend.fifo_store` refuses with
a ConfigurationError saying why and what to use instead.

Keys begin with the prefixes of the backend's
:class:`~pubsub_toolkit.stores.backends.base.StoreNames` (by default the stores' own; from
settings, with ``PUBSUB_TOOLKIT_STORE_PREFIX`` in front).

redis-py comes with the ``redis`` extra; it is imported when a backend is made, not before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.stores._redis_calls import connect, import_redis
from pubsub_toolkit.stores.backends.base import StoreNames
from pubsub_toolkit.stores.stats.base import INGRESS_SCOPE

if TYPE_CHECKING:
    import redis as redis_lib

    from pubsub_toolkit.stores.counters.redis import RedisSequenceCounter
    from pubsub_toolkit.stores.dedup.redis import RedisDedupStore
    from pubsub_toolkit.stores.fifo_state.redis import RedisFifoStore
    from pubsub_toolkit.stores.stats.redis import RedisStatsStore


class RedisBackend:
    """Every store on ``client`` (a ``redis.Redis`` or ``redis.cluster.RedisCluster``).

    ``names``: the key prefixes (default: the stores' own). A client you pass stays yours
    (:meth:`close` leaves it open unless ``owns_client``); one made by :meth:`from_url` is
    closed by :meth:`close`.
    """

    name = "redis"

    def __init__(
        self,
        client: redis_lib.Redis | redis_lib.RedisCluster,
        *,
        clock: Clock = SYSTEM_CLOCK,
        owns_client: bool = False,
        names: StoreNames | None = None,
    ) -> None:
        import_redis("the Redis backend")  # a missing extra is named here, not in a store
        self.client = client
        self.names = names or StoreNames()
        self._clock = clock
        self._owned = owns_client

    @classmethod
    def from_url(
        cls, url: str, *, clock: Clock = SYSTEM_CLOCK, names: StoreNames | None = None
    ) -> RedisBackend:
        """Connect to ``url`` (``redis://``, ``rediss://`` or ``unix://``) with short timeouts;
        a cluster node gets a cluster client. Nothing is sent but one ``INFO cluster``."""
        client = connect(url, needed_by="the Redis backend")
        return cls(client, clock=clock, owns_client=True, names=names)

    def dedup_store(self, **kwargs: Any) -> RedisDedupStore:
        """``kwargs``: RedisDedupStore's (``prefix``)."""
        from pubsub_toolkit.stores.dedup.redis import RedisDedupStore

        kwargs.setdefault("prefix", self.names.dedup_key_prefix)
        return RedisDedupStore(self.client, clock=self._clock, **kwargs)

    def fifo_store(self, **kwargs: Any) -> RedisFifoStore:
        """ConfigurationError on a cluster client (the store's script writes two keys)."""
        from pubsub_toolkit.stores.fifo_state.redis import RedisFifoStore

        kwargs.setdefault("prefix", self.names.fifo_state_key_prefix)
        return RedisFifoStore(self.client, **kwargs)  # type: ignore[arg-type]  # it refuses one

    def counter(self, **kwargs: Any) -> RedisSequenceCounter:
        from pubsub_toolkit.stores.counters.redis import RedisSequenceCounter

        kwargs.setdefault("prefix", self.names.counter_key_prefix)
        return RedisSequenceCounter(self.client, **kwargs)

    def stats_store(self, *, scope: str = INGRESS_SCOPE, **kwargs: Any) -> RedisStatsStore:
        from pubsub_toolkit.stores.stats.redis import RedisStatsStore

        kwargs.setdefault("prefix", self.names.stats_key_prefix)
        return RedisStatsStore(self.client, scope=scope, **kwargs)  # type: ignore[arg-type]

    def close(self) -> None:
        if self._owned:
            self.client.close()
