"""Redis (Memorystore) sequence counter: one small script per reservation.

The script increments the counter (``HINCRBY``, atomic, returns the new highest number), so a
block of any size is one round trip with no read and no transaction: ``first = result - count
+ 1``. Concurrent callers in one process share round trips through one pipeline
(:mod:`pubsub_toolkit.stores._coalesce`); each keeps its own call and so its own block.

Keys are ``{prefix}{group}`` (Redis keys are binary-safe, so any group name works); the prefix
is configurable to keep deployments and tests apart. Each key is a hash ``{n: highest number,
e: epoch}``: the script records the epoch (the server's ``TIME`` in microseconds) when it
creates the counter, so a counter that Redis lost and made again is a *newer* sequence, never
its old numbers (:mod:`.base`). A counter written before epochs (a plain integer) becomes a
hash at its next reservation, keeps its numbers and gets its epoch then (the consumer's record,
which has none yet, adopts it and keeps its position). Each reservation sets the
key's expiry to ``ttl`` (the deployment's ``DEDUP_TTL``): a group idle that long starts again
at 1 in a new epoch, together with the consumer's record of it, which expires after the same
retention.

Cluster-safe: each script and read touches one key, so the counter also runs on Redis
Cluster / Memorystore for Redis Cluster with a ``redis.cluster.RedisCluster`` client
(:meth:`RedisSequenceCounter.from_url` picks one when the server is a cluster node); there
each call goes to its key's shard on its own (a cluster pipeline carries no scripts).

The counter fails closed: if Redis cannot be reached it raises StoreUnavailableError
(transient), never a guessed number.

**Durability matters here more than for dedup.** If Redis loses the key (a restart without
persistence, an eviction under ``maxmemory-policy allkeys-*``), numbers restart at 1 in a new
epoch: the consumer starts the group again there, and messages of the old sequence still in
flight are dead-lettered (``fifo_sequence_restarted``). A failover to a replica that had not
caught up is worse: the key survives with a lower number and the *same* epoch, so numbers are
handed out again (the Publisher refuses a number below one it handed out itself; the gate
dead-letters a reused number it still holds a key for). Run the counter on a Memorystore
instance with persistence (AOF, ``appendfsync always`` for no loss window) and
``maxmemory-policy noeviction``, or use the Firestore counter. A reserved but unpublished
number is a gap, detectable as described in :mod:`pubsub_toolkit.stores.counters.base`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, TypeVar, cast

from pubsub_toolkit.config import DEFAULT_TTL_SECONDS
from pubsub_toolkit.stores._coalesce import Coalescer, Operation
from pubsub_toolkit.stores._redis_calls import (
    connect,
    fail_closed,
    import_redis,
    is_cluster_client,
    is_unavailable,
    unavailable,
)
from pubsub_toolkit.stores.counters.base import SequenceBlock, check_group, check_reservation

if TYPE_CHECKING:
    import redis as redis_lib

T = TypeVar("T")

DEFAULT_PREFIX = "pubsub_toolkit:fifo:"

# KEYS[1] = the counter; ARGV[1] = count, ARGV[2] = expiry in milliseconds. Returns
# {highest number, epoch}. (replicate_commands: TIME before writes on Redis < 5; a no-op after.)
# A script is atomic but not undone: a command that errors leaves the writes before it applied.
# So the key is checked first - a counter hash (a non-negative n, an epoch) or a plain counter
# from before epochs - and a key that is anything else is refused before anything is written:
# a reservation that fails reserved nothing (reserve_many reports it for its group alone).
# What can still fail after the checks (an increment past 2^63) fails before the first write.
_RESERVE = """
if redis.replicate_commands then redis.replicate_commands() end
local key = KEYS[1]
local kind = redis.call('TYPE', key)['ok']
local function refuse(why)
  return redis.error_reply('ERR ' .. key .. ' is no sequence counter: ' .. why)
end
if kind == 'hash' then
  local n, e = unpack(redis.call('HMGET', key, 'n', 'e'))
  if not (e and string.match(e, '^%d+$')) then return refuse('no epoch') end
  if n and not string.match(n, '^%d+$') then return refuse('n is ' .. n) end
elseif kind == 'string' then
  local n = redis.call('GET', key)
  if not string.match(n, '^%d+$') then return refuse('its value is ' .. n) end
elseif kind ~= 'none' then
  return refuse('a ' .. kind)
end
local last
if kind == 'hash' then
  last = redis.call('HINCRBY', key, 'n', ARGV[1])
else
  -- The increment first (it alone can still fail), then the plain counter (or none) becomes
  -- a hash with its numbers and an epoch.
  last = redis.call('INCRBY', key, ARGV[1])
  local t = redis.call('TIME')
  redis.call('DEL', key)
  redis.call('HSET', key, 'n', last, 'e', t[1] .. string.format('%06d', tonumber(t[2])))
end
redis.call('PEXPIRE', key, ARGV[2])
return {last, redis.call('HGET', key, 'e')}
"""
# KEYS[1] = the counter: its highest number, from a hash or a counter written before epochs.
_CURRENT = """
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'string' then return redis.call('GET', KEYS[1]) end
if kind == 'hash' then return redis.call('HGET', KEYS[1], 'n') end
return false
"""


class RedisSequenceCounter:
    """Per-group counters as Redis integers under ``{prefix}{group}``."""

    def __init__(
        self,
        client: redis_lib.Redis | redis_lib.RedisCluster,
        *,
        prefix: str = DEFAULT_PREFIX,
        ttl: timedelta = timedelta(seconds=DEFAULT_TTL_SECONDS),
    ) -> None:
        """``ttl``: how long a counter outlives its last reservation - the consumer's
        ``DEDUP_TTL``, after which it forgets an idle group (never shorter)."""
        if ttl <= timedelta(0):
            raise ValueError(f"ttl must be positive, got {ttl}")
        self._redis_module = import_redis("the Redis sequence counter")
        self._client = client
        self._cluster = is_cluster_client(self._redis_module, client)
        self._prefix = prefix
        self._ttl_ms = max(1, round(ttl.total_seconds() * 1000))
        self._coalescer = Coalescer(self._flush)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        ttl: timedelta = timedelta(seconds=DEFAULT_TTL_SECONDS),
    ) -> RedisSequenceCounter:
        """Connect to ``url`` (``redis://host:port/db``) with short timeouts; a cluster node
        gets a cluster client."""
        return cls(connect(url, needed_by="the Redis sequence counter"), prefix=prefix, ttl=ttl)

    def reserve(self, group: str, count: int = 1) -> SequenceBlock:
        check_reservation(group, count)
        key, ttl = self._key(group), self._ttl_ms
        last, epoch = self._call(
            lambda: self._coalescer.run(lambda pipe: pipe.eval(_RESERVE, 1, key, count, ttl))
        )
        return SequenceBlock.ending_at(group, int(last), count, int(epoch))

    def reserve_many(self, requests: Mapping[str, int]) -> dict[str, SequenceBlock | Exception]:
        """A block of ``count`` numbers for each ``group: count``, in ONE round trip (a
        pipeline of the reservation script; on a cluster, a call per group's shard): what the
        Publisher's numbering thread asks for all the groups it has messages waiting in.

        Each group's outcome is its own (on a cluster, each shard's call too): its block, or
        the error that reserved nothing for it (its key holds no counter: the script refuses it
        before writing; Redis refusing writes: StoreUnavailableError) - the other groups'
        blocks are reserved and must be used. A failed round trip (Redis cannot be reached,
        the reply was lost) raises StoreUnavailableError: then a group's script may or may not
        have run, as for a :meth:`reserve` whose reply was lost - a gap the consumer's gap
        timeout handles."""
        for group, count in requests.items():
            check_reservation(group, count)
        if self._cluster:
            outcomes: dict[str, SequenceBlock | Exception] = {}
            for group, count in requests.items():
                # A call per shard: one that fails is its group's outcome, never the blocks
                # the calls before it reserved (a shard that cannot answer: as for reserve).
                try:
                    outcomes[group] = self.reserve(group, count)
                except Exception as exc:
                    outcomes[group] = exc
            return outcomes
        items = list(requests.items())

        def run() -> list[object]:  # (highest number, epoch) per group, or its error
            pipe = self._client.pipeline(transaction=False)
            for group, count in items:
                pipe.eval(_RESERVE, 1, self._key(group), count, self._ttl_ms)
            return pipe.execute(raise_on_error=False)

        results = self._call(run)
        return {
            group: self._outcome(group, count, result)
            for (group, count), result in zip(items, results, strict=True)
        }

    def _outcome(self, group: str, count: int, result: object) -> SequenceBlock | Exception:
        """One group's reply in :meth:`reserve_many`: its block, or its error (a reply that
        says Redis cannot take writes now is StoreUnavailableError, as for :meth:`reserve`)."""
        if isinstance(result, Exception):
            if is_unavailable(self._redis_module, result):
                return unavailable(result)
            return result
        try:
            last, epoch = cast("tuple[bytes | int, bytes | int]", result)
            return SequenceBlock.ending_at(group, int(last), count, int(epoch))
        except (TypeError, ValueError) as exc:  # the script checks its key: never expected
            return exc  # this group's alone: the others' blocks are still theirs to use

    def current(self, group: str) -> int:
        check_group(group)
        key = self._key(group)
        raw = self._call(lambda: self._coalescer.run(lambda pipe: pipe.eval(_CURRENT, 1, key)))
        return 0 if raw is None else int(raw)

    def _flush(self, operations: Sequence[Operation]) -> None:
        if self._cluster:
            # A cluster pipeline cannot carry scripts: each goes to its key's shard alone.
            for operation in operations:
                try:
                    operation.finish(result=operation.apply(self._client))
                except Exception as exc:  # handed to its caller, who raises it (fail closed)
                    operation.finish(error=exc)
            return
        # Not a MULTI transaction: every script is atomic alone and keeps its own result.
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
