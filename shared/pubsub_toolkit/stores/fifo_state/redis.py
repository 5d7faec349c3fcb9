"""Redis (Memorystore) FIFO gate store: a Lua compare-and-set per state write, hashes for parking.

Per ``(consumer, group)`` there are two keys, and one more per consumer:

* ``{prefix}s:{len(consumer)}:{consumer}:{group}`` - a hash ``{v: saves, s: GroupState JSON,
  w: write id}``. ``w`` - a fresh random id per save - is the CAS token :meth:`load` returns;
  ``v`` counts saves, for operators.
* ``{prefix}p:{len(consumer)}:{consumer}:{group}`` - a hash of parked messages, field = seq.
* ``{prefix}g:{len(consumer)}:{consumer}`` - a set of the consumer's group names.

A state with ``expire_at`` (a complete group's tombstone, an idle group's record): the save
script sets ``PEXPIREAT`` at that time on the state hash and on the parked hash (a copy left
there by a crash goes with it), and takes the group out of the groups set once nothing needs
attention (there is nothing to sweep, and a set member would outlive the expired hash for
good). A state without ``expire_at`` is made persistent again (``PERSIST``, the state hash
and the parked hash: a copy parked between an idle save and the save that lists it must not
keep the idle date) and listed. So the
groups set holds the groups the sweeper must visit (``base.listed``), not every group seen.

The consumer is length-prefixed so ``("a:b", "c")`` and ``("a", "b:c")`` never share a key.

``save`` is one ``EVALSHA`` of a small script that checks ``w`` and replaces it atomically, so a
strict compare-and-set costs one round trip and no WATCH retries. The token is the write id, not
the save count, because a Redis that lost writes (a restart without persistence, a failover)
counts again from an older number: a writer holding version 5 from before the loss would match
someone else's fifth save after it and overwrite that state unseen (ABA). A write id is never
issued twice. It also makes retries safe: if redis-py retries the script after a dropped
connection whose first attempt had already applied, the script sees its own write id and answers
"saved" instead of a false "lost the race" (the gate would otherwise believe a lease it actually
holds belongs to someone else).

The default prefix differs from the sequence counter's ``pubsub_toolkit:fifo:``: counter keys
are ``{prefix}{group}`` for any group name, so no layout under that prefix could be sure of
never meeting one.

**Not for Redis Cluster.** The script touches the state hash and the groups set together, and
their keys hash to different slots, so on Redis Cluster / Memorystore for Redis Cluster every
save would fail with CROSSSLOT - the first FIFO message would crash-loop. The store therefore
refuses a cluster when it is configured: a ``redis.cluster.RedisCluster`` client, or (in
:meth:`RedisFifoStore.from_url`) a server that answers ``INFO cluster`` with
``cluster_enabled:1``, raises ConfigurationError naming what to use instead (a standalone
Memorystore for Redis, Basic or Standard tier, or the Firestore backend). Hash tags could put
a consumer's keys in one slot, but then all of a consumer's groups would live on one shard.

The store fails closed: if Redis cannot be reached it raises StoreUnavailableError (transient).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from pubsub_toolkit.errors import ConfigurationError
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores._redis_calls import (
    TIMEOUTS,
    cluster_refusal,
    fail_closed,
    import_redis,
    refuse_cluster,
    server_in_cluster_mode,
    text,
)
from pubsub_toolkit.stores.fifo_state.base import (
    GroupState,
    decode_message,
    encode_message,
    needs_attention,
)

if TYPE_CHECKING:
    import redis as redis_lib

T = TypeVar("T")

DEFAULT_PREFIX = "pubsub_toolkit:fifo_state:"

_CLUSTER_WHY = "its compare-and-set script writes two keys (state hash, groups set) at once"

# KEYS[1] = state hash, KEYS[2] = the consumer's groups set, KEYS[3] = the parked hash.
# ARGV[1] = expected write id ('' = the record must not exist yet), ARGV[2] = state JSON,
# ARGV[3] = this save's write id (unique per save call), ARGV[4] = group name,
# ARGV[5] = expire_at in Unix milliseconds ('' = keep for good), ARGV[6] = '1' while the
# group must stay listed (it needs attention), else '0' (read only with ARGV[5]).
# Returns 1 if the state is (now) ours, 0 if the expected version is stale.
_SAVE_IF_VERSION = """
local current = redis.call('HMGET', KEYS[1], 'v', 'w')
if current[2] == ARGV[3] then return 1 end
if ARGV[1] == '' then
  if current[1] then return 0 end
elseif current[2] ~= ARGV[1] then
  return 0
end
local version = (tonumber(current[1]) or 0) + 1
redis.call('HSET', KEYS[1], 'v', version, 's', ARGV[2], 'w', ARGV[3])
if ARGV[5] ~= '' then
  redis.call('PEXPIREAT', KEYS[1], ARGV[5])
  redis.call('PEXPIREAT', KEYS[3], ARGV[5])
  if ARGV[6] == '1' then
    redis.call('SADD', KEYS[2], ARGV[4])
  else
    redis.call('SREM', KEYS[2], ARGV[4])
  end
else
  redis.call('PERSIST', KEYS[1])
  redis.call('PERSIST', KEYS[3])
  redis.call('SADD', KEYS[2], ARGV[4])
end
return 1
"""


class KeyLayout:
    """The keys of the module docstring, for the sync and the asyncio store alike (each sees
    the other's state)."""

    _prefix: str

    def _state_key(self, consumer: str, group: str) -> str:
        return f"{self._prefix}s:{len(consumer)}:{consumer}:{group}"

    def _parked_key(self, consumer: str, group: str) -> str:
        return f"{self._prefix}p:{len(consumer)}:{consumer}:{group}"

    def _groups_key(self, consumer: str) -> str:
        return f"{self._prefix}g:{len(consumer)}:{consumer}"

    def _save_keys(self, consumer: str, group: str) -> list[str]:
        """:data:`_SAVE_IF_VERSION`'s KEYS."""
        return [
            self._state_key(consumer, group),
            self._groups_key(consumer),
            self._parked_key(consumer, group),
        ]


def save_args(state: GroupState, expected_version: str, write_id: str, group: str) -> list[str]:
    """:data:`_SAVE_IF_VERSION`'s ARGV for writing ``state`` over ``expected_version``."""
    expire_ms = "" if state.expire_at is None else str(_unix_ms(state.expire_at))
    listed = "1" if needs_attention(state) else "0"
    return [expected_version, state.to_json(), write_id, group, expire_ms, listed]


def loaded(raw: Any, write_id: Any) -> GroupState:
    """The state an ``HMGET s w`` read, versioned by its write id; a fresh one if none."""
    if raw is None or write_id is None:
        return GroupState()
    return GroupState.from_json(raw, version=text(write_id))


class RedisFifoStore(KeyLayout):
    """Gate state and parked messages per ``(consumer, group)`` in Redis hashes."""

    def __init__(self, client: redis_lib.Redis, *, prefix: str = DEFAULT_PREFIX) -> None:
        self._redis_module = import_redis("the Redis FIFO gate store")
        refuse_cluster(
            self._redis_module, client, store="The Redis FIFO gate store", why=_CLUSTER_WHY
        )
        self._client = client
        self._prefix = prefix
        # register_script runs EVALSHA and loads the script itself after a NOSCRIPT answer
        # (a restarted or flushed Redis), so callers never see a missing script.
        self._save_script = client.register_script(_SAVE_IF_VERSION)

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisFifoStore:
        """Connect to ``url`` (``redis://host:port/db``) with short timeouts.

        Asks the server once whether it is a cluster node and refuses it if so (see the module
        docstring); an unreachable server is not refused here - its calls fail closed later.
        """
        redis = import_redis("the Redis FIFO gate store")
        client = redis.Redis.from_url(url, **TIMEOUTS)
        if server_in_cluster_mode(redis, client):
            client.close()
            raise ConfigurationError(
                cluster_refusal(
                    "The Redis FIFO gate store (PUBSUB_TOOLKIT_REDIS_URL is a cluster node)",
                    _CLUSTER_WHY,
                )
            )
        return cls(client, **kwargs)

    def load(self, consumer: str, group: str) -> GroupState:
        """The group's state; a fresh ``GroupState()`` (version None) if there is none."""
        key = self._state_key(consumer, group)
        # One HMGET: the version and the state it belongs to are read atomically.
        return loaded(*self._call(lambda: self._client.hmget(key, ["s", "w"])))

    def save(
        self, consumer: str, group: str, state: GroupState, expected: GroupState
    ) -> GroupState | None:
        """Write ``state`` if the stored version is still ``expected.version``; the state
        with its new version, or None if the expected version was stale."""
        expected_version = "" if expected.version is None else str(expected.version)
        write_id = uuid.uuid4().hex
        keys = self._save_keys(consumer, group)
        args = save_args(state, expected_version, write_id, group)
        if not self._call(lambda: self._save_script(keys=keys, args=args)):
            return None
        return replace(state, version=write_id)

    def park(self, consumer: str, group: str, seq: int, message: Message) -> None:
        """Store an early arrival; HSETNX keeps the first copy of a seq."""
        key = self._parked_key(consumer, group)
        self._call(lambda: self._client.hsetnx(key, str(seq), encode_message(message)))

    def parked_message(self, consumer: str, group: str, seq: int) -> Message | None:
        """The parked message for ``seq``, or None."""
        key = self._parked_key(consumer, group)
        raw = self._call(lambda: self._client.hget(key, str(seq)))
        return None if raw is None else decode_message(raw)

    def unpark(self, consumer: str, group: str, seq: int) -> None:
        """Delete a parked message (Redis drops the hash with its last field)."""
        key = self._parked_key(consumer, group)
        self._call(lambda: self._client.hdel(key, str(seq)))

    def groups(self, consumer: str) -> list[str]:
        """The consumer's listed groups (``base.listed``), sorted: one SMEMBERS."""
        key = self._groups_key(consumer)
        members = self._call(lambda: self._client.smembers(key))
        return sorted(text(m) for m in members)

    def _call(self, operation: Callable[[], T]) -> T:
        # Fail closed: without the store the gate cannot know the group's position.
        return fail_closed(self._redis_module, operation)


def _unix_ms(at: datetime) -> int:
    """``at`` as Unix milliseconds, rounded up: a tombstone never expires before its time."""
    micros = round(at.timestamp() * 1_000_000)
    return -(-micros // 1000)
