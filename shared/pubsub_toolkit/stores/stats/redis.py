"""Redis stats store: every writer ``HINCRBY``s the same hash, in one pipelined round trip.

``HINCRBY`` is atomic and Redis has no per-key write limit worth worrying about here, so all
instances can share one hash; the reader is a single ``HGETALL``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pubsub_toolkit.stores._redis_calls import fail_closed, import_redis
from pubsub_toolkit.stores.stats.base import INGRESS_SCOPE

if TYPE_CHECKING:
    import redis as redis_lib


class RedisStatsStore:
    """Counters of ``scope`` in the hash ``{prefix}{scope}``."""

    def __init__(
        self,
        client: redis_lib.Redis,
        *,
        scope: str = INGRESS_SCOPE,
        prefix: str = "pubsub_toolkit:stats:",
    ) -> None:
        self._redis_module = import_redis("the Redis stats store")
        self._client = client
        self.key = f"{prefix}{scope}"

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisStatsStore:
        redis_module = import_redis("the Redis stats store")
        return cls(redis_module.Redis.from_url(url, socket_timeout=5), **kwargs)

    def add(self, deltas: Mapping[str, int]) -> None:
        if not deltas:
            return

        def write() -> None:
            pipe = self._client.pipeline(transaction=True)  # all deltas of one flush or none
            for name, amount in deltas.items():
                pipe.hincrby(self.key, name, amount)
            pipe.execute()

        fail_closed(self._redis_module, write)

    def totals(self) -> dict[str, int]:
        raw: dict[Any, Any] = fail_closed(
            self._redis_module, lambda: self._client.hgetall(self.key)
        )
        return {_text(k): int(v) for k, v in raw.items()}


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
