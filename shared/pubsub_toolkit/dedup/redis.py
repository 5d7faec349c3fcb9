"""Redis (Memorystore) dedup store: ``SET NX PX`` claims, WATCH takeovers, Lua completions.

The common case - a new key - is one round trip (``SET key value NX PX ttl``), and concurrent
callers share round trips through one pipeline (:mod:`.coalesce`). Only when the key
exists does the store read it and, for an expired lease or record, take it over with an
optimistic WATCH/MULTI transaction so that exactly one contender wins. ``complete`` and
``release`` check the fencing token inside a Lua script, atomically.

The store fails closed: if Redis cannot be reached it raises StoreUnavailableError (transient),
never "assume new".
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.dedup import codec, rules
from pubsub_toolkit.dedup.coalesce import Coalescer, Operation
from pubsub_toolkit.dedup.store import Claim, ClaimStatus, DedupRecord
from pubsub_toolkit.errors import StaleClaimError
from pubsub_toolkit.redis_calls import fail_closed, import_redis

if TYPE_CHECKING:
    import redis as redis_lib

T = TypeVar("T")

# KEYS[1] = record key; ARGV = token, new encoded value, mode ("px" with ARGV[4] ms, or "keep").
_REPLACE_IF_TOKEN = """
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
local rec = cjson.decode(raw)
if tonumber(rec['t']) ~= tonumber(ARGV[1]) or rec['s'] ~= 'pending' then return 0 end
if ARGV[3] == 'keep' then
  redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
else
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[4])
end
return 1
"""


class RedisDedupStore:
    """Dedup records as JSON strings under ``{prefix}{namespace}:{key}``."""

    def __init__(
        self,
        client: redis_lib.Redis,
        *,
        prefix: str = "pubsub_toolkit:dedup:",
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._redis_module = import_redis("the Redis dedup store")
        self._client = client
        self._prefix = prefix
        self._clock = clock
        # Redis names a script by the SHA-1 of its text, so the id is known without asking.
        self._script_sha = hashlib.sha1(_REPLACE_IF_TOKEN.encode()).hexdigest()
        self._coalescer = Coalescer(self._flush)

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisDedupStore:
        """Connect to ``url`` (``redis://host:port/db``) with short timeouts."""
        redis = import_redis("the Redis dedup store")
        client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        return cls(client, **kwargs)

    def claim(
        self, namespace: str, key: str, fingerprint: str, *, lease: timedelta, ttl: timedelta
    ) -> Claim:
        rkey = self._key(namespace, key)
        now = self._clock.now()
        fresh = rules.pending_record(namespace, key, fingerprint, 1, now=now, lease=lease, ttl=ttl)
        value, ttl_ms = codec.encode(fresh), _ms(fresh.expire_at, now)
        created = self._call(
            lambda: self._pipelined(rkey, lambda p: p.set(rkey, value, nx=True, px=ttl_ms))
        )
        if created:
            return Claim(ClaimStatus.ACQUIRED, 1, fresh)
        return self._call(
            lambda: self._claim_existing(
                rkey, namespace=namespace, key=key, fingerprint=fingerprint, lease=lease, ttl=ttl
            )
        )

    def _claim_existing(
        self,
        rkey: str,
        *,
        namespace: str,
        key: str,
        fingerprint: str,
        lease: timedelta,
        ttl: timedelta,
    ) -> Claim:
        watch_error = self._redis_module.WatchError
        with self._client.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(rkey)  # type: ignore[no-untyped-call]
                    raw = pipe.get(rkey)
                    existing = None if raw is None else codec.decode(raw)
                    now = self._clock.now()
                    status = rules.evaluate_claim(existing, fingerprint, now)
                    if status not in (ClaimStatus.ACQUIRED, ClaimStatus.TAKEN_OVER):
                        pipe.unwatch()
                        assert existing is not None
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
                    pipe.multi()
                    pipe.set(rkey, codec.encode(record), px=_ms(record.expire_at, now))
                    pipe.execute()
                    return Claim(status, record.token, record)
                except watch_error:
                    continue  # someone changed the key between our read and write: re-evaluate

    def complete(
        self, namespace: str, key: str, claim: Claim, result: str | None, *, ttl: timedelta
    ) -> None:
        if claim.record is None:
            raise StaleClaimError(f"claim on {namespace}/{key} carries no record")
        now = self._clock.now()
        done = rules.done_record(claim.record, result, now=now, ttl=ttl)
        args: list[str | int] = [claim.token, codec.encode(done), "px", _ms(done.expire_at, now)]
        ok = self._call(lambda: self._replace_if_token_pipelined(self._key(namespace, key), args))
        if not ok:
            raise StaleClaimError(f"claim {claim.token} on {namespace}/{key} is no longer held")

    def release(self, namespace: str, key: str, claim: Claim) -> None:
        if claim.record is None:
            return
        released = rules.released_record(claim.record, now=self._clock.now())
        args: list[str | int] = [claim.token, codec.encode(released), "keep", 0]
        self._call(lambda: self._replace_if_token_pipelined(self._key(namespace, key), args))

    def get(self, namespace: str, key: str) -> DedupRecord | None:
        rkey = self._key(namespace, key)
        raw = self._call(lambda: self._pipelined(rkey, lambda p: p.get(rkey)))
        if raw is None:
            return None
        record = codec.decode(raw)
        return None if record.is_expired(self._clock.now()) else record

    def _replace_if_token_pipelined(self, rkey: str, args: list[str | int]) -> Any:
        # EVALSHA straight into the pipeline: redis-py's Script objects would add a SCRIPT
        # EXISTS round trip to every flush. A missing script is loaded once in _flush.
        return self._pipelined(rkey, lambda p: p.evalsha(self._script_sha, 1, rkey, *args))

    def _pipelined(self, rkey: str, apply: Callable[[Any], object]) -> Any:
        """Run one command, sharing a pipeline with concurrent callers (see .coalesce)."""
        return self._coalescer.run(apply, key=rkey)

    def _flush(self, operations: Sequence[Operation]) -> None:
        # Not a MULTI transaction: each command keeps its own result, errors included.
        unscripted = self._execute(operations)
        if unscripted:
            # Redis restarted or flushed its scripts since we last used ours: load it, retry.
            self._client.script_load(_REPLACE_IF_TOKEN)
            for operation in self._execute(unscripted):
                operation.finish(error=RuntimeError("Redis refused to keep the fencing script"))

    def _execute(self, operations: Sequence[Operation]) -> list[Operation]:
        """Run ``operations`` in one pipeline; return those that failed for a missing script."""
        pipe = self._client.pipeline(transaction=False)
        for operation in operations:
            operation.apply(pipe)
        missing_script = []
        for operation, result in zip(operations, pipe.execute(raise_on_error=False), strict=True):
            if isinstance(result, self._redis_module.exceptions.NoScriptError):
                missing_script.append(operation)
            elif isinstance(result, Exception):
                operation.finish(error=result)
            else:
                operation.finish(result=result)
        return missing_script

    def _key(self, namespace: str, key: str) -> str:
        # Length-prefixed, so ("a:b", "c") and ("a", "b:c") never share a key.
        return f"{self._prefix}{len(namespace)}:{namespace}:{key}"

    def _call(self, operation: Callable[[], T]) -> T:
        # Fail closed: without the store we cannot know whether this is a duplicate.
        return fail_closed(self._redis_module, operation)


def _ms(until: datetime, now: datetime) -> int:
    """Milliseconds from ``now`` to ``until``, at least 1 (PX must be positive)."""
    return max(1, int((until - now).total_seconds() * 1000))
