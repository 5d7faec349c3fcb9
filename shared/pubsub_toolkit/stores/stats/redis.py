"""Redis stats store: every writer ``HINCRBY``s the same hashes, in one pipelined round trip.

``HINCRBY`` is atomic and Redis has no per-key write limit worth worrying about here, so all
instances can share one totals hash (``{prefix}{scope}``) and one hash per minute
(``{prefix}{scope}:minute:YYYYMMDDHHMM``, expiring ``SERIES_RETENTION`` after its minute). A
flush is one ``MULTI`` round trip: an ``HINCRBY`` per changed counter on each hash and one
``EXPIREAT``. The totals reader is a single ``HGETALL``; the minutes reader one pipelined
``HGETALL`` per minute asked for (61 for an hour, one round trip).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pubsub_toolkit.stores._redis_calls import fail_closed, import_redis, text
from pubsub_toolkit.stores.stats.base import (
    INGRESS_SCOPE,
    SERIES_RETENTION,
    minute_key,
    minute_of,
    minutes_between,
)

if TYPE_CHECKING:
    import redis as redis_lib


class RedisStatsStore:
    """Counters of ``scope`` in the hash ``{prefix}{scope}``, minutes beside it."""

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

    def minute_hash(self, minute: datetime) -> str:
        """The key of ``minute``'s hash."""
        return f"{self.key}:minute:{minute_key(minute_of(minute))}"

    def add(
        self,
        deltas: Mapping[str, int],
        per_minute: Mapping[str, int] | None = None,
        *,
        minute: datetime | None = None,
    ) -> None:
        in_minute = deltas if per_minute is None else per_minute
        if not deltas and (minute is None or not in_minute):
            return

        def write() -> None:
            pipe = self._client.pipeline(transaction=True)  # all deltas of one flush or none
            for name, amount in deltas.items():
                pipe.hincrby(self.key, name, amount)
            if minute is not None and in_minute:
                key = self.minute_hash(minute)
                for name, amount in in_minute.items():
                    pipe.hincrby(key, name, amount)
                pipe.expireat(key, minute_of(minute) + SERIES_RETENTION)
            pipe.execute()

        fail_closed(self._redis_module, write)

    def totals(self) -> dict[str, int]:
        raw: dict[Any, Any] = fail_closed(
            self._redis_module, lambda: self._client.hgetall(self.key)
        )
        return {text(k): int(v) for k, v in raw.items()}

    def minutes(self, since: datetime, until: datetime) -> dict[datetime, dict[str, int]]:
        wanted = minutes_between(since, until)

        def read() -> list[Any]:
            pipe = self._client.pipeline(transaction=False)
            for minute in wanted:
                pipe.hgetall(self.minute_hash(minute))
            return list(pipe.execute())

        raw = fail_closed(self._redis_module, read)
        return {
            minute: {text(k): int(v) for k, v in counts.items()}
            for minute, counts in zip(wanted, raw, strict=True)
            if counts
        }
