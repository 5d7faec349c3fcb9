"""Async stores on real servers, and a blocking view of any async object for reusing the sync
test suites (contract, gate scenarios) against the async implementations unchanged."""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.stores.dedup.memory import AsyncMemoryDedupStore
from pubsub_toolkit.stores.fifo_state.memory import AsyncMemoryFifoStore

ASYNC_BACKENDS = ("async-memory", "async-redis", "async-firestore")


class Blocking:
    """``target`` with each coroutine method run to completion on ``loop`` (a test's view)."""

    def __init__(self, target: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._target = target
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if inspect.iscoroutinefunction(value):
            return lambda *args, **kwargs: self._loop.run_until_complete(value(*args, **kwargs))
        return value


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """A fresh event loop for one test; async clients made on it are closed with it."""
    loop = asyncio.new_event_loop()
    yield loop
    loop.run_until_complete(_close_clients())
    loop.close()


_CLIENTS: list[Any] = []


async def _close_clients() -> None:
    while _CLIENTS:
        client = _CLIENTS.pop()
        result = client.aclose() if hasattr(client, "aclose") else client.close()
        if inspect.isawaitable(result):
            await result


def redis_client(url: str) -> Any:
    from pubsub_toolkit.stores.dedup.redis_async import connect_async

    client = connect_async(url, needed_by="tests")
    _CLIENTS.append(client)
    return client


def firestore_client(project: str) -> Any:
    from google.cloud import firestore

    client = firestore.AsyncClient(project=project)
    _CLIENTS.append(client)
    return client


def async_dedup_factory(request: pytest.FixtureRequest, backend: str) -> Callable[..., Any]:
    """``make(clock=...)``: a fresh async dedup store of ``backend``; stores of one factory
    share their data (like workers of one deployment)."""
    suffix = uuid.uuid4().hex[:12]
    if backend == "async-memory":
        shared: dict[str, AsyncMemoryDedupStore] = {}

        def make_memory(clock: Clock = SYSTEM_CLOCK) -> Any:
            return shared.setdefault("store", AsyncMemoryDedupStore(clock))

        return make_memory
    if backend == "async-redis":
        from pubsub_toolkit.stores.dedup.redis_async import AsyncRedisDedupStore

        url = request.getfixturevalue("redis_url")
        return lambda clock=SYSTEM_CLOCK: AsyncRedisDedupStore(
            redis_client(url), prefix=f"test-{suffix}:", clock=clock
        )
    if backend == "async-firestore":
        from pubsub_toolkit.stores.dedup.firestore_async import AsyncFirestoreDedupStore

        request.getfixturevalue("firestore_emulator")
        return lambda clock=SYSTEM_CLOCK: AsyncFirestoreDedupStore(
            firestore_client(f"test-{suffix}"), clock=clock
        )
    raise ValueError(backend)


def async_fifo_factory(request: pytest.FixtureRequest, backend: str) -> Callable[[], Any]:
    """``make()``: a new async FIFO store of ``backend`` (its own client); one data set."""
    suffix = uuid.uuid4().hex[:12]
    if backend == "async-memory":
        shared = AsyncMemoryFifoStore()
        return lambda: shared
    if backend == "async-redis":
        from pubsub_toolkit.stores.fifo_state.redis_async import AsyncRedisFifoStore

        url = request.getfixturevalue("redis_url")
        return lambda: AsyncRedisFifoStore(redis_client(url), prefix=f"test-{suffix}:")
    if backend == "async-firestore":
        from pubsub_toolkit.stores.fifo_state.firestore_async import AsyncFirestoreFifoStore

        request.getfixturevalue("firestore_emulator")
        return lambda: AsyncFirestoreFifoStore(firestore_client(f"test-{suffix}"))
    raise ValueError(backend)
