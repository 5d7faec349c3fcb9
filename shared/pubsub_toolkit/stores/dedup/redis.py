"""Redis (Memorystore) dedup store: the claim loop's primitives as ``SET NX GET`` and one Lua CAS.

The decisions are :mod:`.claims`' (the one claim loop, shared with every backend); this module
performs its primitives. A claim is one round trip whatever it finds: ``SET key value NX PX ttl
GET`` (the loop's create-or-get) creates the record when the key is free and otherwise returns
the record that holds it, so a duplicate or a contender learns the holder in the same reply
(Redis >= 7.0; an older server gets the same answer from a two-line script,
:data:`_CLAIM_OR_GET`). Every other write - a takeover, ``complete``, ``release`` - is the
loop's compare-and-set: :data:`_REPLACE_IF_SAME` replaces the record only if it still holds
exactly the bytes expected (the record as read, or as this claim wrote it) and otherwise returns
what it holds, so the loop decides again without another read. So claim + complete is two round
trips, as plain as ``SET NX`` then ``SET XX``; a takeover adds one.

Alone, a call is one raw command on a pooled connection (no pipeline object, none of redis-py's
per-command machinery: see :class:`_SoloConnection`); concurrent callers of one store share
round trips (:mod:`pubsub_toolkit.stores._coalesce`), their commands packed into one write,
including several on one record (Redis runs them in order, each atomically).

``complete`` is idempotent per claim (the loop's rule: a record already ``done`` under the
claim's own token is our first attempt, applied although its reply was lost).

Cluster-safe: every command and script here touches one key (the record), so the store also
runs on Redis Cluster / Memorystore for Redis Cluster with a ``redis.cluster.RedisCluster``
client (:meth:`RedisDedupStore.from_url` picks one when the server is a cluster node).
redis-py refuses EVALSHA inside a cluster pipeline, so there the scripts are called directly
(routed by the record's slot) instead of sharing a pipeline.

The store fails closed: if Redis cannot be reached, or refuses the command for now (READONLY,
OOM, ...: :func:`~pubsub_toolkit.stores._redis_calls.is_unavailable`), it raises
StoreUnavailableError (transient), never "assume new".

(About 400 lines: the store, its two Lua scripts and the raw call path its round trips
share are one protocol; split apart, each piece would only make sense read with the others.)
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.stores._coalesce import Coalescer, Operation
from pubsub_toolkit.stores._redis_calls import (
    connect,
    import_redis,
    is_cluster_client,
    raise_if_unavailable,
)
from pubsub_toolkit.stores.dedup import _codec as codec
from pubsub_toolkit.stores.dedup import claims
from pubsub_toolkit.stores.dedup.base import Claim, DedupRecord
from pubsub_toolkit.stores.dedup.claims import CreateOrGet, Found, Op, Replace, Reply, Stored

if TYPE_CHECKING:
    import redis as redis_lib

T = TypeVar("T")

# The loop's compare-and-set. KEYS[1] = record key; ARGV = the raw record expected, its
# replacement, PX ms. Returns 1 if the record still held exactly what was expected and now holds
# the replacement; otherwise what it holds now (a string), or 0 if the key is gone.
_REPLACE_IF_SAME = """
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
if raw ~= ARGV[1] then return raw end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
"""

# SET NX GET for servers before Redis 7.0 (which refuse NX with GET): KEYS[1] = record key,
# ARGV = new value, PX ms. Nil if the key was free (and now holds ARGV[1]), else its value.
_CLAIM_OR_GET = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return false end
return redis.call('GET', KEYS[1])
"""

SCRIPTS = (_REPLACE_IF_SAME, _CLAIM_OR_GET)


def script_sha(script: str) -> str:
    """Redis names a script by the SHA-1 of its text, so the id is known without asking."""
    return hashlib.sha1(script.encode()).hexdigest()


_SHA = {script: script_sha(script) for script in SCRIPTS}


class _SoloConnection:
    """Raw calls on a connection borrowed from the client's pool.

    redis-py's command path (its retry closure, per-command observability, event dispatch,
    response callbacks) and a Pipeline object per batch cost the client about as much CPU as
    the round trip itself. This sends the packed command(s) and reads the raw reply(ies) on a
    pooled connection: so the pool still decides everything about connections (its health
    check before lending, a new process id after a fork, how many exist - a backend's stores
    keep sharing one), and the connection's own retry policy and disconnect-on-error apply as
    in redis-py. Error replies come back as redis-py's exceptions. Replies are the server's
    raw ones, so it carries only commands whose reply needs no parsing callback (SET ... GET,
    GET, EVALSHA).

    The store's coalescer runs one round trip at a time, so the store needs at most one
    connection at a time. While callers keep coming (each flush hands leadership to a waiter),
    the connection stays borrowed from one round trip to the next instead of going back to the
    pool and out again - the pool's two locked, metered hand-overs cost about as much client
    CPU as the flush's own commands - and :meth:`release` returns it as soon as the store is
    idle (the coalescer's ``on_idle``): a lone call still borrows and returns it around its
    one round trip. An error returns it at once (disconnected by the retry, as redis-py does);
    one borrowed before a fork is never used by the child.
    """

    __slots__ = ("_held", "_pool", "_response_error")

    def __init__(self, pool: Any, redis_module: Any) -> None:
        self._pool = pool
        self._response_error: type[Exception] = redis_module.ResponseError
        self._held: Any = None

    def _borrow(self) -> Any:
        connection = self._held
        if connection is not None:
            self._held = None
            if connection.pid == os.getpid():
                return connection
            # Borrowed by the parent before a fork: the child's pool has reset itself.
        return self._pool.get_connection()

    def release(self) -> None:
        """Return the connection kept between back-to-back round trips, if any, to the pool."""
        connection = self._held
        if connection is not None:
            self._held = None
            if connection.pid == os.getpid():
                self._pool.release(connection)

    def call(self, command: tuple[Any, ...]) -> Any:
        """One command's raw reply; an error reply raised."""
        connection = self._borrow()
        try:

            def send() -> Any:
                connection.send_command(*command)
                return connection.read_response()

            reply = connection.retry.call_with_retry(send, lambda _error: connection.disconnect())
        except BaseException:
            self._pool.release(connection)
            raise
        self._held = connection
        return reply

    def call_many(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        """Every command in one round trip; each reply raw, an error reply as its exception."""
        connection = self._borrow()
        response_error = self._response_error
        try:

            def send() -> list[Any]:
                connection.send_packed_command(connection.pack_commands(commands))
                replies: list[Any] = []
                for _ in commands:
                    try:
                        replies.append(connection.read_response())
                    except response_error as exc:  # an error reply: the stream stays in step
                        replies.append(exc)
                return replies

            replies: list[Any] = connection.retry.call_with_retry(
                send, lambda _error: connection.disconnect()
            )
        except BaseException:
            self._pool.release(connection)
            raise
        self._held = connection
        return replies


class RedisDedupStore(claims.ClaimLoop[str]):
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
        # Cleared on the first "syntax error" for SET NX GET (Redis < 7.0): claims then go
        # through _CLAIM_OR_GET, which answers the same in the same single round trip.
        self._nx_get = True
        # Calls go raw over pooled connections (see _SoloConnection); a cluster client (it
        # routes per key) or a single-connection client uses its own commands.
        plain = not self._cluster and getattr(client, "connection", None) is None
        pool = getattr(client, "connection_pool", None) if plain else None
        if getattr(pool, "cache", None) is not None:
            pool = None  # client-side caching wants to see every command: leave it redis-py's
        self._solo = None if pool is None else _SoloConnection(pool, self._redis_module)
        self._coalescer = Coalescer(
            self._flush, on_idle=None if self._solo is None else self._solo.release
        )

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisDedupStore:
        """Connect to ``url`` (``redis://host:port/db``) with short timeouts; a cluster node
        gets a cluster client."""
        return cls(connect(url, needed_by="the Redis dedup store"), **kwargs)

    def _claim_existing(
        self,
        rkey: str,
        raw: Any,
        *,
        namespace: str,
        key: str,
        fingerprint: str,
        lease: timedelta,
        ttl: timedelta,
    ) -> Claim:
        """The claim loop from the record ``raw`` that a create-or-get found at ``rkey``."""
        found = Found(codec.decode(raw), raw)
        protocol = claims.settle(
            found, namespace, key, fingerprint, clock=self._clock, lease=lease, ttl=ttl
        )
        return self._drive(protocol, rkey)

    def _drive(self, protocol: claims.Protocol[T], rkey: str) -> T:
        """Run the claim loop's ``protocol`` on ``rkey``; fail closed (without the store we
        cannot know whether this is a duplicate)."""
        try:
            return claims.run(protocol, partial(self._perform, rkey))
        except Exception as exc:
            raise_if_unavailable(self._redis_module, exc)
            raise

    def _perform(self, rkey: str, op: Op) -> Reply:
        """One primitive of the claim loop: one round trip (alone or shared)."""
        if type(op) is CreateOrGet:
            value = codec.encode(op.record)
            raw = self._create_or_get(rkey, value, op.record, self._clock.now())
            return Stored(value) if raw is None else Found(codec.decode(raw), raw)
        if type(op) is Replace:
            value = codec.encode(op.record)
            # The version is the raw record read; without one, the record as this process
            # wrote it (the encoding is deterministic), so a complete needs no read first.
            expected = op.version if op.version is not None else codec.encode(op.expected)
            ttl_ms = _ms(op.record.expire_at, self._clock.now())
            outcome = self._eval(_REPLACE_IF_SAME, rkey, [expected, value, ttl_ms])
            if outcome == 1:
                return Stored(value)
            return _found(outcome)
        return _found(
            self._run(("GET", rkey), lambda p: p.get(rkey), lambda: self._client.get(rkey))
        )

    def _create_or_get(self, rkey: str, value: str, record: DedupRecord, now: datetime) -> Any:
        """Create the record if ``rkey`` is free (None), else return the raw record there."""
        ttl_ms = _ms(record.expire_at, now)
        if self._nx_get:
            try:
                command = ("SET", rkey, value, "NX", "PX", ttl_ms, "GET")
                if self._solo is not None:
                    return self._raw(command)
                return self._run(
                    command,
                    lambda p: p.set(rkey, value, nx=True, px=ttl_ms, get=True),
                    lambda: self._client.set(rkey, value, nx=True, px=ttl_ms, get=True),
                )
            except self._redis_module.ResponseError as exc:
                if "syntax" not in str(exc).lower():
                    raise
                self._nx_get = False  # Redis < 7.0: NX and GET together are refused
        return self._eval(_CLAIM_OR_GET, rkey, [value, ttl_ms])

    def _eval(self, script: str, rkey: str, args: Sequence[Any]) -> Any:
        """One of :data:`SCRIPTS` on ``rkey``, alone or sharing a round trip."""
        if self._cluster:
            return self._script(script, rkey, args)
        sha = _SHA[script]
        # EVALSHA straight into the pipeline: redis-py's Script objects would add a SCRIPT
        # EXISTS round trip to every flush. A missing script is loaded once in _flush.
        if self._solo is not None:
            return self._raw(("EVALSHA", sha, 1, rkey, *args))
        return self._run(
            ("EVALSHA", sha, 1, rkey, *args),
            lambda p: p.evalsha(sha, 1, rkey, *args),
            lambda: self._script(script, rkey, args),
        )

    def _script(self, script: str, rkey: str, args: Sequence[Any]) -> Any:
        """``script`` as its own call with the client (EVALSHA; loaded once if Redis lacks
        it): the cluster path (redis-py blocks EVALSHA in cluster pipelines) and a
        single-connection client's."""
        sha = _SHA[script]
        try:
            return self._client.evalsha(sha, 1, rkey, *args)
        except self._redis_module.exceptions.NoScriptError:
            # A cluster client loads it on every primary, so the retry finds it on any shard.
            self._client.script_load(script)
            return self._client.evalsha(sha, 1, rkey, *args)

    def _run(
        self,
        command: tuple[Any, ...],
        pipelined: Callable[[Any], object],
        via_client: Callable[[], Any],
    ) -> Any:
        """Run one command: alone when nobody else is calling, else in one round trip shared
        with concurrent callers (see .coalesce). With the private connection both carry
        ``command`` itself; without it (cluster, single-connection client) alone is
        ``via_client()`` and shared is ``pipelined(pipeline)``.

        No coalescer key: unlike a Firestore batch, a pipeline may hold several commands on
        one record. Redis runs them in order, each atomically, exactly as if sent one after
        the other, so 8 callers racing for one key share one round trip too (the first
        command creates the record, the others get it back) instead of 8 in a row.
        """
        if self._solo is not None:
            return self._raw(command)
        return self._coalescer.run(pipelined, alone=via_client)

    def _raw(self, command: tuple[Any, ...]) -> Any:
        """:meth:`_run` with the raw connection: ``command`` alone or in a shared flush."""
        return self._coalescer.run(
            lambda commands: commands.append(command), alone=lambda: self._solo_call(command)
        )

    def _solo_call(self, command: tuple[Any, ...]) -> Any:
        solo = self._solo
        assert solo is not None  # only _raw calls it, with the raw connection
        try:
            return solo.call(command)
        except self._redis_module.exceptions.NoScriptError:
            self._load_scripts()  # Redis restarted or flushed its scripts since we used ours
            return solo.call(command)

    def _load_scripts(self) -> None:
        for script in SCRIPTS:
            self._client.script_load(script)

    def _flush(self, operations: Sequence[Operation]) -> None:
        # Not a MULTI transaction: each command keeps its own result, errors included.
        unscripted = self._execute(operations)
        if unscripted:
            self._load_scripts()  # Redis restarted or flushed its scripts since we used ours
            for operation in self._execute(unscripted):
                operation.finish(
                    error=RuntimeError("Redis refused to keep its compare-and-set script")
                )

    def _execute(self, operations: Sequence[Operation]) -> list[Operation]:
        """Run ``operations`` in one round trip; return those that failed for a missing
        script."""
        solo = self._solo
        if solo is not None:
            commands: list[tuple[Any, ...]] = []
            for operation in operations:
                operation.apply(commands)
            replies = solo.call_many(commands)
        else:
            pipe = self._client.pipeline(transaction=False)
            for operation in operations:
                operation.apply(pipe)
            replies = pipe.execute(raise_on_error=False)
        missing_script = []
        no_script = self._redis_module.exceptions.NoScriptError
        for operation, result in zip(operations, replies, strict=True):
            if isinstance(result, no_script):
                missing_script.append(operation)
            elif isinstance(result, Exception):
                operation.finish(error=result)
            else:
                operation.finish(result=result)
        return missing_script

    def _key(self, namespace: str, key: str) -> str:
        # Length-prefixed, so ("a:b", "c") and ("a", "b:c") never share a key.
        return f"{self._prefix}{len(namespace)}:{namespace}:{key}"


def _found(raw: Any) -> Found:
    """What a key holds, from a raw reply (None or 0: nothing)."""
    if raw is None or raw == 0:
        return Found(None)
    return Found(codec.decode(raw), raw)


def _ms(until: datetime, now: datetime) -> int:
    """Milliseconds from ``now`` to ``until``, at least 1 (PX must be positive)."""
    return max(1, int((until - now).total_seconds() * 1000))
