"""Redis dedup store for asyncio (``redis.asyncio``): the same records, keys and Lua fencing
script as :class:`~pubsub_toolkit.stores.dedup.redis.RedisDedupStore`, so sync and async
workers share one store.

A claim is one round trip whatever it finds: ``SET NX PX GET`` creates the record or returns the
one there (``_CLAIM_OR_GET`` on a server before Redis 7.0); an expired lease or record is taken
over by the shared compare-and-set script (``_TAKE_OVER``: exactly one contender wins);
``complete`` and ``release`` run the shared token-checking script (``_REPLACE_IF_TOKEN``).
Every decision is :mod:`pubsub_toolkit.stores.dedup.rules`', every record encoding :mod:`._codec`'s.
Round trips are not coalesced into pipelines as in the sync store: on one event loop the calls
are already concurrent on the client's connection pool. Fails closed (StoreUnavailableError), on a
standalone Redis or a cluster (its one-key commands and scripts run on either).
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.errors import StaleClaimError
from pubsub_toolkit.stores._redis_calls import (
    SOCKET_TIMEOUT,
    import_redis,
    raise_if_unavailable,
    server_in_cluster_mode,
)
from pubsub_toolkit.stores.dedup import _codec as codec
from pubsub_toolkit.stores.dedup import rules
from pubsub_toolkit.stores.dedup.base import Claim, ClaimStatus, DedupRecord
from pubsub_toolkit.stores.dedup.redis import (
    _CLAIM_OR_GET,
    _REPLACE_IF_TOKEN,
    _SHA,
    _TAKE_OVER,
    _ms,
)

T = TypeVar("T")


class AsyncRedisDedupStore:
    """Dedup records as JSON strings under ``{prefix}{namespace}:{key}`` (as the sync store)."""

    def __init__(
        self, client: Any, *, prefix: str = "pubsub_toolkit:dedup:", clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self._redis_module = import_redis("the async Redis dedup store")
        self._client = client  # a redis.asyncio.Redis
        self._prefix = prefix
        self._clock = clock
        self._nx_get = True  # cleared on Redis < 7.0, as in the sync store

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> AsyncRedisDedupStore:
        """A ``redis.asyncio`` client for ``url`` with short timeouts."""
        return cls(connect_async(url, needed_by="the async Redis dedup store"), **kwargs)

    async def claim(
        self, namespace: str, key: str, fingerprint: str, *, lease: timedelta, ttl: timedelta
    ) -> Claim:
        rkey = self._key(namespace, key)
        now = self._clock.now()
        fresh = rules.pending_record(namespace, key, fingerprint, 1, now=now, lease=lease, ttl=ttl)
        raw = await self._create_or_get(rkey, codec.encode(fresh), fresh, now)
        if raw is None:
            return Claim(ClaimStatus.ACQUIRED, 1, fresh)
        while True:
            existing = codec.decode(raw)
            now = self._clock.now()
            status = rules.evaluate_claim(existing, fingerprint, now)
            if status not in (ClaimStatus.ACQUIRED, ClaimStatus.TAKEN_OVER):
                return Claim(status, existing.token, existing)
            record = rules.pending_record(
                namespace,
                key,
                fingerprint,
                rules.next_token(existing),
                now=now,
                lease=lease,
                ttl=ttl,
            )
            value = codec.encode(record)
            outcome = await self._script(_TAKE_OVER, rkey, [raw, value, _ms(record.expire_at, now)])
            if outcome == 1:
                return Claim(status, record.token, record)
            if outcome == 0:  # the key expired meanwhile: a fresh claim, as on a new key
                fresh = rules.pending_record(
                    namespace, key, fingerprint, 1, now=now, lease=lease, ttl=ttl
                )
                raw = await self._create_or_get(rkey, codec.encode(fresh), fresh, now)
                if raw is None:
                    return Claim(ClaimStatus.ACQUIRED, 1, fresh)
            else:
                raw = outcome  # someone wrote first: decide again on what they wrote

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

    async def complete(
        self, namespace: str, key: str, claim: Claim, result: str | None, *, ttl: timedelta
    ) -> None:
        if claim.record is None:
            raise StaleClaimError(f"claim on {namespace}/{key} carries no record")
        now = self._clock.now()
        done = rules.done_record(claim.record, result, now=now, ttl=ttl)
        args = [claim.token, codec.encode(done), "px", _ms(done.expire_at, now), "1"]
        if not await self._script(_REPLACE_IF_TOKEN, self._key(namespace, key), args):
            raise StaleClaimError(f"claim {claim.token} on {namespace}/{key} is no longer held")

    async def release(self, namespace: str, key: str, claim: Claim) -> None:
        if claim.record is None:
            return
        released = rules.released_record(claim.record, now=self._clock.now())
        await self._script(
            _REPLACE_IF_TOKEN,
            self._key(namespace, key),
            [claim.token, codec.encode(released), "keep", 0, "0"],
        )

    async def get(self, namespace: str, key: str) -> DedupRecord | None:
        raw = await self._call(self._client.get(self._key(namespace, key)))
        if raw is None:
            return None
        record = codec.decode(raw)
        return None if record.is_expired(self._clock.now()) else record

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

    timeouts: dict[str, Any] = {
        "socket_timeout": SOCKET_TIMEOUT,
        "socket_connect_timeout": SOCKET_TIMEOUT,
    }
    probe = redis.Redis.from_url(url, **timeouts)
    try:
        cluster = server_in_cluster_mode(redis, probe)
    finally:
        probe.close()
    if cluster:
        return aioredis.RedisCluster.from_url(url, **timeouts)
    return aioredis.Redis.from_url(url, **timeouts)
