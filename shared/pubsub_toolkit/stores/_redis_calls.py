"""How every Redis store of the toolkit imports redis-py, connects and fails: lazily, and closed.

redis-py is an optional extra: a missing install names the ``pip install`` that fixes it. A
Redis that cannot answer becomes :class:`~pubsub_toolkit.errors.StoreUnavailableError`
(transient: the message is delivered again later) - a store never guesses ("assume new", "next
number"). "Cannot answer" is decided in one place, :func:`is_unavailable`, for the sync and the
asyncio clients: a connection error or timeout, and an error *reply* that says the server
cannot take the command now (:data:`UNAVAILABLE_REPLIES`: a replica after a failover, memory
full, a dataset still loading, a cluster re-sharding or down, a busy script). Callers above
(the FIFO gate's advance, the dedup processor's complete) retry a StoreUnavailableError and
raise an ALERT when it persists; any other error reply is a bug and propagates as it is.

Redis Cluster (Memorystore for Redis Cluster) only runs a command, script or transaction whose
keys all hash to one slot. The dedup store and the sequence counter touch one key per
operation, so they run there with a ``redis.cluster.RedisCluster`` client (:func:`connect`
picks one when the server says it is a cluster node). The FIFO gate store's compare-and-set
touches two keys, so it refuses a cluster at configuration time (:func:`refuse_cluster`)
rather than failing with CROSSSLOT on the first message.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from pubsub_toolkit._extras import import_optional
from pubsub_toolkit.errors import ConfigurationError, StoreUnavailableError

T = TypeVar("T")
logger = logging.getLogger(__name__)

# Short, so a dead Redis fails a call in seconds rather than hanging a delivery.
SOCKET_TIMEOUT = 5.0
TIMEOUTS = {"socket_timeout": SOCKET_TIMEOUT, "socket_connect_timeout": SOCKET_TIMEOUT}


def import_redis(needed_by: str) -> Any:
    """The redis module, or MissingDependencyError saying what needs it and how to install."""
    return import_optional("redis", extra="redis", needed_by=needed_by)


# Error-reply codes (the reply's first word) that mean "this server cannot take the command
# now", not "the command is wrong": READONLY (a replica: a failover moved the primary), OOM
# (maxmemory with noeviction), LOADING, BUSY (a long script), MASTERDOWN, NOREPLICAS
# (min-replicas), MISCONF (a failing RDB save refuses writes), TRYAGAIN and CLUSTERDOWN (a
# cluster re-sharding or down).
UNAVAILABLE_REPLIES = frozenset(
    {
        "READONLY",
        "OOM",
        "LOADING",
        "BUSY",
        "MASTERDOWN",
        "NOREPLICAS",
        "MISCONF",
        "TRYAGAIN",
        "CLUSTERDOWN",
    }
)
# redis-py's own classes for some of them (it strips the code from their message), and the
# cluster client's "no node answers for this slot" errors (not RedisError subclasses).
_UNAVAILABLE_CLASSES = (
    "ConnectionError",
    "TimeoutError",
    "ReadOnlyError",
    "OutOfMemoryError",
    "TryAgainError",
    "ClusterDownError",
    "ClusterError",
    "SlotNotCoveredError",
    "RedisClusterUnreachableError",
)


def fail_closed(redis_module: Any, operation: Callable[[], T]) -> T:
    """Run ``operation``; an error :func:`is_unavailable` says is "Redis cannot answer"
    becomes StoreUnavailableError, any other propagates unchanged."""
    try:
        return operation()
    except Exception as exc:
        raise_if_unavailable(redis_module, exc)
        raise


def is_unavailable(redis_module: Any, exc: BaseException) -> bool:
    """True if ``exc`` (from a sync or an asyncio client) means Redis cannot answer now: a
    connection error, a timeout, or an error reply of :data:`UNAVAILABLE_REPLIES`."""
    exceptions = redis_module.exceptions
    classes = tuple(
        getattr(exceptions, name) for name in _UNAVAILABLE_CLASSES if hasattr(exceptions, name)
    )
    if isinstance(exc, classes):
        return True
    if not isinstance(exc, redis_module.ResponseError):
        return False
    code = getattr(exc, "status_code", None) or str(exc).split(" ", 1)[0]
    return code in UNAVAILABLE_REPLIES


def raise_if_unavailable(redis_module: Any, exc: Exception) -> None:
    """Raise :func:`unavailable` of ``exc`` (chained) if :func:`is_unavailable`; else return,
    and the caller re-raises ``exc`` itself (for a hot path's own ``except``, where
    :func:`fail_closed`'s closure would cost a call per operation)."""
    if is_unavailable(redis_module, exc):
        raise unavailable(exc) from exc


def unavailable(exc: Exception) -> StoreUnavailableError:
    """The StoreUnavailableError that ``exc`` (one :func:`is_unavailable` accepts) becomes.

    Credentials refused after the process started (an AUTH string rotated under it) stay
    transient - nothing is acked, the message comes back - but say what to fix."""
    if type(exc).__name__ == "AuthenticationError":
        return StoreUnavailableError(credentials_refused(exc))
    return StoreUnavailableError(f"Redis is unavailable: {type(exc).__name__}: {exc}")


def credentials_refused(exc: Exception) -> str:
    """What to fix when Redis refuses the URL's credentials (redis-py's message, which never
    holds the password)."""
    return (
        f"Redis refused the credentials of its URL ({type(exc).__name__}: {exc}): check the AUTH "
        "string (redis://:PASSWORD@host:port/db) in PUBSUB_TOOLKIT_REDIS_URL or "
        "PUBSUB_TOOLKIT_REDIS_URL_SECRET"
    )


def text(value: bytes | str) -> str:
    """A reply's value as str (a client made with ``decode_responses`` returns str already)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def is_cluster_client(redis_module: Any, client: object) -> bool:
    """True for a ``redis.cluster.RedisCluster`` client (it routes each key to its slot)."""
    return isinstance(client, redis_module.RedisCluster)


def server_in_cluster_mode(redis_module: Any, client: Any) -> bool:
    """Whether the server ``client`` reaches says ``cluster_enabled:1`` (``INFO cluster``).

    Best effort, asked once at configuration: an unreachable server, or one that refuses INFO
    (an ACL, a renamed command), counts as "not known to be a cluster", so starting while
    Redis is down still works and fails closed on the first real call instead (an unreachable
    one with a WARNING: a URL whose TLS does not match the server never connects). A server
    that answers but refuses the URL's credentials is a ConfigurationError here: redis-py
    raises it as a ConnectionError, yet no redelivery can heal a wrong AUTH string.
    """
    try:
        info = client.info("cluster")
    except redis_module.AuthenticationError as exc:
        raise ConfigurationError(credentials_refused(exc)) from None
    except (redis_module.ConnectionError, redis_module.TimeoutError) as exc:
        tls = issubclass(client.connection_pool.connection_class, redis_module.SSLConnection)
        logger.warning(
            "Redis did not answer at start (%s: %s); starting anyway, each message waits for "
            "it. If it stays so, check PUBSUB_TOOLKIT_REDIS_URL's scheme: %s",
            type(exc).__name__,
            exc,
            "it is rediss:// (TLS), which a server without in-transit encryption never answers"
            " - use redis:// for one"
            if tls
            else "a server with in-transit encryption needs rediss:// (not redis://) and "
            "PUBSUB_TOOLKIT_REDIS_CA_CERT_SECRET",
        )
        return False
    except redis_module.ResponseError:
        return False
    return str(info.get("cluster_enabled", 0)) == "1"


def connect(url: str, *, needed_by: str) -> Any:
    """A client for ``url`` (``redis://host:port/db``) with short timeouts, for a store whose
    every operation touches one key: a ``RedisCluster`` client when the server is a cluster
    node (a plain client would get MOVED for keys of other nodes), else a plain one."""
    redis = import_redis(needed_by)
    client = redis.Redis.from_url(url, **TIMEOUTS)
    if not server_in_cluster_mode(redis, client):
        return client
    client.close()
    return redis.RedisCluster.from_url(url, **TIMEOUTS)


def refuse_cluster(redis_module: Any, client: object, *, store: str, why: str) -> None:
    """ConfigurationError if ``client`` is a Redis Cluster client: ``store`` cannot run there."""
    if is_cluster_client(redis_module, client):
        raise ConfigurationError(cluster_refusal(store, why))


def cluster_refusal(store: str, why: str) -> str:
    """The message that says why ``store`` cannot run on Redis Cluster and what to use."""
    return (
        f"{store} cannot run on Redis Cluster / Memorystore for Redis Cluster: {why}. Use a "
        "standalone Redis (Memorystore for Redis, Basic or Standard tier) for "
        "PUBSUB_TOOLKIT_REDIS_URL, or "
        "the Firestore backend (PUBSUB_TOOLKIT_STORE_BACKEND=firestore)."
    )
