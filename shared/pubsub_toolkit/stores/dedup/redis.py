"""Redis (Memorystore) dedup store: ``SET NX PX`` claims, WATCH takeovers, Lua completions.

The common case - a new key - is one round trip (``SET key value NX PX ttl``), and concurrent
callers share round trips through one pipeline (:mod:`pubsub_toolkit.stores._coalesce`). Only
when the key exists does the store read it and, for an expired lease or record, take it over with an
optimistic WATCH/MULTI transaction so that exactly one contender wins. ``complete`` and
``release`` check the fencing token inside a Lua script, atomically.

``complete`` is idempotent per claim: a record already ``done`` under the claim's own token is
our first attempt, applied although its reply was lost (a dropped connection, a timeout), so
the retry reports success instead of a stale claim - which would log a false "effect ran after
our lease expired" alert and make Pub/Sub redeliver a finished message. A done record under
another token is a newer holder's, and still refused. ``release`` never touches a done record.

Cluster-safe: every command, script and WATCH transaction here touches one key (the record),
so the store also runs on Redis Cluster / Memorystore for Redis Cluster with a
``redis.cluster.RedisCluster`` client (:meth:`RedisDedupStore.from_url` picks one when the
server is a cluster node). redis-py refuses EVALSHA inside a cluster pipeline, so there the
fencing script is called directly (routed by the record's slot) instead of sharing a pipeline.

The store fails closed: if Redis cannot be reached it raises StoreUnavailableError (transient),
never "assume new".
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.dedup import rules
from pubsub_toolkit.errors import StaleClaimError
from pubsub_toolkit.stores._coalesce import Coalescer, Operation
from pubsub_toolkit.stores._redis_calls import connect, fail_closed, import_redis, is_cluster_client
from pubsub_toolkit.stores.dedup import _codec as codec
from pubsub_toolkit.stores.dedup.base import Claim, ClaimStatus, DedupRecord

if TYPE_CHECKING:
    import redis as redis_lib

T = TypeVar("T")

# KEYS[1] = record key; ARGV = token, new encoded value, mode ("px" with ARGV[4] ms, or "keep"),
# and ARGV[5] = "1" when a record already done under this token counts as success (complete).
# Returns 1 if the record now holds our write, 0 if the token is no longer ours.
_REPLACE_IF_TOKEN = """
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
local rec = cjson.decode(raw)
if tonumber(rec['t']) ~= tonumber(ARGV[1]) then return 0 end
if rec['s'] == 'done' then
  if ARGV[5] == '1' then return 1 end
  return 0
end
if rec['s'] ~= 'pending' then return 0 end
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
        client: redis_lib.Redis | redis_lib.RedisCluster,
        *,
        prefix: str = "pubsub_toolkit:dedup:",
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._redis_module = import_redis("the Redis dedup store")
        self._client = client
        self._prefix = prefix
        self._clock = clock
        self._cluster = is_cluster_client(self._redis_module, client)
        # Redis names a script by the SHA-1 of its text, so the id is known without asking.
        self._script_sha = hashlib.sha1(_REPLACE_IF_TOKEN.encode()).hexdigest()
        self._coalescer = Coalescer(self._flush)

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisDedupStore:
        """Connect to ``url`` (``redis://host:port/db``) with short timeouts; a cluster node
        gets a cluster client."""
        return cls(connect(url, needed_by="the Redis dedup store"), **kwargs)

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
        # transaction=True is the default of a plain client; a cluster client needs it said
        # to allow WATCH/MULTI (on one key, so one slot).
        with self._client.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(rkey)
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
        args: list[str | int] = [
            claim.token,
            codec.encode(done),
            "px",
            _ms(done.expire_at, now),
            "1",  # done under our token = our own earlier attempt: success
        ]
        ok = self._call(lambda: self._replace_if_token_pipelined(self._key(namespace, key), args))
        if not ok:
            raise StaleClaimError(f"claim {claim.token} on {namespace}/{key} is no longer held")

    def release(self, namespace: str, key: str, claim: Claim) -> None:
        if claim.record is None:
            return
        released = rules.released_record(claim.record, now=self._clock.now())
        args: list[str | int] = [claim.token, codec.encode(released), "keep", 0, "0"]
        self._call(lambda: self._replace_if_token_pipelined(self._key(namespace, key), args))

    def get(self, namespace: str, key: str) -> DedupRecord | None:
        rkey = self._key(namespace, key)
        raw = self._call(lambda: self._pipelined(rkey, lambda p: p.get(rkey)))
        if raw is None:
            return None
        record = codec.decode(raw)
        return None if record.is_expired(self._clock.now()) else record

    def _replace_if_token_pipelined(self, rkey: str, args: list[str | int]) -> Any:
        if self._cluster:
            return self._replace_if_token_direct(rkey, args)
        # EVALSHA straight into the pipeline: redis-py's Script objects would add a SCRIPT
        # EXISTS round trip to every flush. A missing script is loaded once in _flush.
        return self._pipelined(rkey, lambda p: p.evalsha(self._script_sha, 1, rkey, *args))

    def _replace_if_token_direct(self, rkey: str, args: list[str | int]) -> Any:
        """The fencing script as its own call: redis-py blocks EVALSHA in cluster pipelines."""
        try:
            return self._client.evalsha(self._script_sha, 1, rkey, *args)
        except self._redis_module.exceptions.NoScriptError:
            # A cluster client loads it on every primary, so the retry finds it on any shard.
            self._client.script_load(_REPLACE_IF_TOKEN)
            return self._client.evalsha(self._script_sha, 1, rkey, *args)

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
