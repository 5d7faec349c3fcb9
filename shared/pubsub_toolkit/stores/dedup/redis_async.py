"""Redis dedup store for asyncio (``redis.asyncio``): the same records, keys and Lua
scripts as :class:`~pubsub_toolkit.stores.dedup.redis.RedisDedupStore`, so sync and async
workers share one store.

The claim loop is :mod:`.claims`' (the one written for every backend, sync and async); this
module performs its primitives as the sync store does: create-or-get is ``SET NX PX GET`` (one
round trip whatever it finds; ``_CLAIM_OR_GET`` on a server before Redis 7.0), every other
write the shared compare-and-set script (``_REPLACE_IF_SAME``). Every record encoding is
:mod:`._codec`'s.
Round trips are not coalesced into pipelines as in the sync store: on one event loop the calls
are already concurrent on the client's connection pool. Fails closed (StoreUnavailableError), on a
standalone Redis or a cluster (its one-key commands and scripts run on either).
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from datetime import datetime
from functools import partial
from typing import Any, TypeVar

from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.stores._redis_calls import (
    TIMEOUTS,
    import_redis,
    raise_if_unavailable,
    server_in_cluster_mode,
)
from pubsub_toolkit.stores.dedup import _codec as codec
from pubsub_toolkit.stores.dedup import claims
from pubsub_toolkit.stores.dedup.base import DedupRecord
from pubsub_toolkit.stores.dedup.claims import CreateOrGet, Op, Replace, Reply, Stored
from pubsub_toolkit.stores.dedup.redis import (
    _CLAIM_OR_GET,
    _REPLACE_IF_SAME,
    _SHA,
    _found,
    _ms,
)

T = TypeVar("T")


class AsyncRedisDedupStore(claims.AsyncClaimLoop[str]):
    """Dedup records as JSON strings under ``{prefix}{namespace}:{key}`` (as the sync store)."""

    def __init__(
        self, client: Any, *, prefix: str = "pubsub_toolkit:dedup:", clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self._redis_module = import_redis("the async Redis dedup store")
        self._client = client  # a redis.asyncio.Redis
        self._prefix = prefix
        self._clock = clock
        self._nx_get = True  # cleared on Redis < 7.0, as in the sync store

    async def _drive(self, protocol: claims.Protocol[T], rkey: str) -> T:
        return await claims.run_async(protocol, partial(self._perform, rkey))

    async def _perform(self, rkey: str, op: Op) -> Reply:
        """One primitive of the claim loop, as the sync store performs it: one round trip."""
        if type(op) is CreateOrGet:
            value = codec.encode(op.record)
            raw = await self._create_or_get(rkey, value, op.record, self._clock.now())
            return Stored(value) if raw is None else _found(raw)
        if type(op) is Replace:
            value = codec.encode(op.record)
            expected = op.version if op.version is not None else codec.encode(op.expected)
            ttl_ms = _ms(op.record.expire_at, self._clock.now())
            outcome = await self._script(_REPLACE_IF_SAME, rkey, [expected, value, ttl_ms])
            return Stored(value) if outcome == 1 else _found(outcome)
        return _found(await self._call(self._client.get(rkey)))

    async def _create_or_get(
        self, rkey: str, value: str, record: DedupRecord, now: datetime
    ) -> Any:
        """Create the record if ``rkey`` is free (None), else return the raw record there."""
        ttl_ms = _ms(record.expire_at, now)
        if self._nx_get:
            try:
                return await self._call(self._client.set(rkey, value, nx=True, px=ttl_ms, get=True))
            except self._redis_module.ResponseError as exc:
                if "syntax" not in str(exc).lower():
                    raise
                self._nx_get = False  # Redis < 7.0: NX and GET together are refused
        return await self._script(_CLAIM_OR_GET, rkey, [value, ttl_ms])

    async def _script(self, script: str, rkey: str, args: Sequence[Any]) -> Any:
        """One of the sync store's scripts by EVALSHA, loaded once if Redis lacks it."""
        sha = _SHA[script]
        try:
            return await self._call(self._client.evalsha(sha, 1, rkey, *args))
        except self._redis_module.exceptions.NoScriptError:
            # Redis restarted or flushed its scripts since we last used ours: load it, retry.
            await self._call(self._client.script_load(script))
            return await self._call(self._client.evalsha(sha, 1, rkey, *args))

    def _key(self, namespace: str, key: str) -> str:
        # The sync store's layout (tests check that both see each other's records).
        return f"{self._prefix}{len(namespace)}:{namespace}:{key}"

    async def _call(self, operation: Awaitable[T]) -> T:
        return await fail_closed_async(self._redis_module, operation)


async def fail_closed_async(redis_module: Any, operation: Awaitable[T]) -> T:
    """Await ``operation``; an error that means "Redis cannot answer" (a connection error, a
    timeout, an error reply such as READONLY or OOM: see
    :func:`~pubsub_toolkit.stores._redis_calls.is_unavailable`, shared with the sync stores)
    becomes StoreUnavailableError; any other propagates unchanged."""
    try:
        return await operation
    except Exception as exc:
        raise_if_unavailable(redis_module, exc)
        raise


def connect_async(url: str, *, needed_by: str) -> Any:
    """A ``redis.asyncio`` client for ``url`` with the sync stores' short timeouts, picked as
    :func:`~pubsub_toolkit.stores._redis_calls.connect` picks the sync one: a
    ``redis.asyncio.RedisCluster`` when the server says it is a cluster node (asked once, here,
    with a sync ``INFO cluster``: configuration happens before the loop serves messages), else a
    ``redis.asyncio.Redis``. The FIFO gate store refuses the cluster client, as the sync one
    does."""
    redis = import_redis(needed_by)
    from redis import asyncio as aioredis

    timeouts: dict[str, Any] = TIMEOUTS
    probe = redis.Redis.from_url(url, **timeouts)
    try:
        cluster = server_in_cluster_mode(redis, probe)
    finally:
        probe.close()
    if cluster:
        return aioredis.RedisCluster.from_url(url, **timeouts)
    return aioredis.Redis.from_url(url, **timeouts)
