"""Redis (Memorystore) sequence counter: one ``INCRBY`` per reservation.

``INCRBY key count`` is atomic and returns the new highest number, so a block of any size is
one round trip with no read and no transaction: ``first = result - count + 1``. Concurrent
callers in one process share round trips through one pipeline (:mod:`pubsub_toolkit.dedup.
coalesce`); each keeps its own ``INCRBY`` and so its own block.

Keys are ``{prefix}{group}`` (Redis keys are binary-safe, so any group name works); the prefix
is configurable to keep deployments and tests apart. Counters carry no TTL: a group's numbers
must never restart.

Cluster-safe: ``INCRBY`` and ``GET`` touch one key each and the pipeline is not a
transaction, so the counter also runs on Redis Cluster / Memorystore for Redis Cluster with a
``redis.cluster.RedisCluster`` client (:meth:`RedisSequenceCounter.from_url` picks one when the
server is a cluster node); the cluster pipeline sends each command to its key's shard.

The counter fails closed: if Redis cannot be reached it raises StoreUnavailableError
(transient), never a guessed number.

**Durability matters here more than for dedup.** If Redis loses the key (a restart without
persistence, a failover to a replica that had not caught up, an eviction under
``maxmemory-policy allkeys-*``), numbers restart below ones already published and the consumer
would see them as already processed. Run the counter on a Memorystore instance with persistence
(AOF, ``appendfsync always`` for no loss window) and ``maxmemory-policy noeviction``, or use
the Firestore counter. A reserved but unpublished number is a gap, detectable as described in
:mod:`pubsub_toolkit.stores.counters.base`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from pubsub_toolkit.stores._coalesce import Coalescer, Operation
from pubsub_toolkit.stores._redis_calls import connect, fail_closed, import_redis
from pubsub_toolkit.stores.counters.base import SequenceBlock, check_group, check_reservation

if TYPE_CHECKING:
    import redis as redis_lib

T = TypeVar("T")

DEFAULT_PREFIX = "pubsub_toolkit:fifo:"


class RedisSequenceCounter:
    """Per-group counters as Redis integers under ``{prefix}{group}``."""

    def __init__(
        self, client: redis_lib.Redis | redis_lib.RedisCluster, *, prefix: str = DEFAULT_PREFIX
    ) -> None:
        self._redis_module = import_redis("the Redis sequence counter")
        self._client = client
        self._prefix = prefix
        self._coalescer = Coalescer(self._flush)

    @classmethod
    def from_url(cls, url: str, *, prefix: str = DEFAULT_PREFIX) -> RedisSequenceCounter:
        """Connect to ``url`` (``redis://host:port/db``) with short timeouts; a cluster node
        gets a cluster client."""
        return cls(connect(url, needed_by="the Redis sequence counter"), prefix=prefix)

    def reserve(self, group: str, count: int = 1) -> SequenceBlock:
        check_reservation(group, count)
        key = self._key(group)
        last = self._call(lambda: self._coalescer.run(lambda pipe: pipe.incrby(key, count)))
        return SequenceBlock.ending_at(group, int(last), count)

    def current(self, group: str) -> int:
        check_group(group)
        key = self._key(group)
        raw = self._call(lambda: self._coalescer.run(lambda pipe: pipe.get(key)))
        return 0 if raw is None else int(raw)

    def _flush(self, operations: Sequence[Operation]) -> None:
        # Not a MULTI transaction: every INCRBY is atomic alone and keeps its own result.
        pipe = self._client.pipeline(transaction=False)
        for operation in operations:
            operation.apply(pipe)
        results = pipe.execute(raise_on_error=False)
        for operation, result in zip(operations, results, strict=True):
            if isinstance(result, Exception):
                operation.finish(error=result)
            else:
                operation.finish(result=result)

    def _key(self, group: str) -> str:
        return f"{self._prefix}{group}"

    def _call(self, operation: Callable[[], T]) -> T:
        # Fail closed: a guessed number could repeat one already published.
        return fail_closed(self._redis_module, operation)
