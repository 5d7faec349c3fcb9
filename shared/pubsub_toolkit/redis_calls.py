"""How every Redis store of the toolkit imports redis-py and fails: lazily, and closed.

redis-py is an optional extra: a missing install names the ``pip install`` that fixes it. An
unreachable Redis becomes :class:`~pubsub_toolkit.errors.StoreUnavailableError` (transient:
the message is delivered again later) - a store never guesses ("assume new", "next number").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pubsub_toolkit.errors import MissingDependencyError, StoreUnavailableError

T = TypeVar("T")


def import_redis(needed_by: str) -> Any:
    """The redis module, or MissingDependencyError saying what needs it and how to install."""
    try:
        import redis
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingDependencyError(
            f"{needed_by} needs redis-py: pip install 'pubsub-toolkit[redis]'"
        ) from exc
    return redis


def fail_closed(redis_module: Any, operation: Callable[[], T]) -> T:
    """Run ``operation``; a connection error or timeout becomes StoreUnavailableError."""
    try:
        return operation()
    except (redis_module.ConnectionError, redis_module.TimeoutError) as exc:
        raise StoreUnavailableError(f"Redis is unavailable: {exc}") from exc
