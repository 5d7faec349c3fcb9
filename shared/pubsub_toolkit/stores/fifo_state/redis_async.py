"""Redis FIFO gate store for asyncio (``redis.asyncio``): the same keys, hashes and Lua
compare-and-set script (``_SAVE_IF_VERSION``) as
:class:`~pubsub_toolkit.stores.fifo_state.redis.RedisFifoStore`, so sync and async consumers
share one store. Not for Redis Cluster (the script writes two keys; see the sync module).
Fails closed (StoreUnavailableError).
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

from pubsub_toolkit.errors import ConfigurationError
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores._redis_calls import cluster_refusal, import_redis, text
from pubsub_toolkit.stores.dedup.redis_async import fail_closed_async
from pubsub_toolkit.stores.fifo_state.base import GroupState, decode_message, encode_message
from pubsub_toolkit.stores.fifo_state.redis import (
    _CLUSTER_WHY,
    _SAVE_IF_VERSION,
    DEFAULT_PREFIX,
    KeyLayout,
    loaded,
    save_args,
)


class AsyncRedisFifoStore(KeyLayout):
    """Gate state and parked messages per ``(consumer, group)`` in Redis hashes."""

    def __init__(self, client: Any, *, prefix: str = DEFAULT_PREFIX) -> None:
        self._redis_module = import_redis("the async Redis FIFO gate store")
        if "Cluster" in type(client).__name__:
            raise ConfigurationError(cluster_refusal("The Redis FIFO gate store", _CLUSTER_WHY))
        self._client = client  # a redis.asyncio.Redis
        self._prefix = prefix
        # An AsyncScript: EVALSHA, loading the script itself after a NOSCRIPT answer.
        self._save_script = client.register_script(_SAVE_IF_VERSION)

    async def load(self, consumer: str, group: str) -> GroupState:
        key = self._state_key(consumer, group)
        return loaded(*await self._call(self._client.hmget(key, ["s", "w"])))

    async def save(
        self, consumer: str, group: str, state: GroupState, expected: GroupState
    ) -> GroupState | None:
        expected_version = "" if expected.version is None else str(expected.version)
        write_id = uuid.uuid4().hex
        keys = self._save_keys(consumer, group)
        args = save_args(state, expected_version, write_id, group)
        if not await self._call(self._save_script(keys=keys, args=args)):
            return None
        return replace(state, version=write_id)

    async def park(self, consumer: str, group: str, seq: int, message: Message) -> None:
        key = self._parked_key(consumer, group)
        await self._call(self._client.hsetnx(key, str(seq), encode_message(message)))

    async def parked_message(self, consumer: str, group: str, seq: int) -> Message | None:
        raw = await self._call(self._client.hget(self._parked_key(consumer, group), str(seq)))
        return None if raw is None else decode_message(raw)

    async def unpark(self, consumer: str, group: str, seq: int) -> None:
        await self._call(self._client.hdel(self._parked_key(consumer, group), str(seq)))

    async def groups(self, consumer: str) -> list[str]:
        members = await self._call(self._client.smembers(self._groups_key(consumer)))
        return sorted(text(m) for m in members)

    async def _call(self, operation: Any) -> Any:
        return await fail_closed_async(self._redis_module, operation)
