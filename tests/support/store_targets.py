"""Every store implementation the simulation replaces by memory stores, as one test target:
memory, Redis standalone, Redis Cluster and the Firestore emulator, each sync and asyncio (the
async stores seen through a blocking view on a loop of the test's own).

A target makes dedup and FIFO stores over one data set (several "workers" of one deployment),
can empty that data set as a restart without persistence would, and - on Redis - can put its
server into an error-reply fault (READONLY, OOM) and heal it. The Redis servers are private to
the test module (see :mod:`tests.support.redis_servers`); the session's are never flushed.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.support.async_stores import Blocking
from tests.support.redis_servers import PrivateRedis

KINDS = ("memory", "redis", "redis-cluster", "firestore")
TARGETS = (*KINDS, *(f"async-{kind}" for kind in KINDS))
REDIS_TARGETS = ("redis", "redis-cluster", "async-redis", "async-redis-cluster")


@dataclass
class Target:
    """One store implementation on one fresh data set."""

    name: str
    make_dedup: Callable[[Clock], Any]
    make_fifo: Callable[[], Any]  # raises ConfigurationError where the store refuses (cluster)
    wipe: Callable[[], None]
    server: PrivateRedis | None = None  # Redis targets: the server to break and heal

    @property
    def cluster(self) -> bool:
        return self.name.endswith("cluster")


@contextlib.contextmanager
def build(
    name: str, request: pytest.FixtureRequest, *, server: PrivateRedis | None = None
) -> Iterator[Target]:
    """The target ``name`` (one of :data:`TARGETS`), its clients closed on leaving; a Redis
    target on ``server`` if given, else on the module's ``redis_standalone`` or
    ``redis_cluster`` fixture."""
    kind = name.removeprefix("async-")
    is_async = name != kind
    loop = asyncio.new_event_loop() if is_async else None
    suffix = uuid.uuid4().hex[:12]
    clients: list[Any] = []

    def view(store: Any) -> Any:
        return store if loop is None else Blocking(store, loop)

    if kind == "memory":
        target = _memory(name, is_async, view)
    elif kind.startswith("redis"):
        if server is None:
            server = request.getfixturevalue(
                "redis_cluster" if kind == "redis-cluster" else "redis_standalone"
            )
        target = _redis(name, server, suffix, is_async, view, clients)
    else:
        request.getfixturevalue("firestore_emulator")
        target = _firestore(name, f"contract-{suffix}", is_async, view, clients)
    try:
        yield target
    finally:
        if loop is not None:
            loop.run_until_complete(_close(clients))
            loop.close()
        else:
            for client in clients:
                client.close()


async def _close(clients: list[Any]) -> None:
    for client in clients:
        closed = client.aclose() if hasattr(client, "aclose") else client.close()
        if inspect.isawaitable(closed):
            await closed


def _memory(name: str, is_async: bool, view: Callable[[Any], Any]) -> Target:
    fifo = MemoryFifoStore()
    made: dict[str, MemoryDedupStore] = {}  # one store (one process), on the first clock given

    def make_dedup(clock: Clock = SYSTEM_CLOCK) -> Any:
        dedup = made.setdefault("dedup", MemoryDedupStore(clock))
        if not is_async:
            return dedup
        from pubsub_toolkit.stores.dedup.memory import AsyncMemoryDedupStore

        return view(AsyncMemoryDedupStore(store=dedup))

    def make_fifo() -> Any:
        if not is_async:
            return fifo
        from pubsub_toolkit.stores.fifo_state.memory import AsyncMemoryFifoStore

        return view(AsyncMemoryFifoStore(store=fifo))

    def wipe() -> None:
        # The memory stores' own data, emptied as a restart would (the objects stay: what code
        # above remembers - its witness - must be what notices).
        for dedup in made.values():
            dedup._records.clear()
        fifo._states.clear()
        fifo._parked.clear()

    return Target(name, make_dedup, make_fifo, wipe)


def _redis(
    name: str,
    server: PrivateRedis,
    suffix: str,
    is_async: bool,
    view: Callable[[Any], Any],
    clients: list[Any],
) -> Target:
    prefix = f"contract-{suffix}:"

    def client() -> Any:
        if is_async:
            from pubsub_toolkit.stores.dedup.redis_async import connect_async

            made = connect_async(server.url, needed_by="tests")
        else:
            from pubsub_toolkit.stores._redis_calls import connect

            made = connect(server.url, needed_by="tests")
        clients.append(made)
        return made

    def make_dedup(clock: Clock = SYSTEM_CLOCK) -> Any:
        if is_async:
            from pubsub_toolkit.stores.dedup.redis_async import AsyncRedisDedupStore

            return view(AsyncRedisDedupStore(client(), prefix=prefix, clock=clock))
        from pubsub_toolkit.stores.dedup.redis import RedisDedupStore

        return RedisDedupStore(client(), prefix=prefix, clock=clock)

    def make_fifo() -> Any:
        if is_async:
            from pubsub_toolkit.stores.fifo_state.redis_async import AsyncRedisFifoStore

            return view(AsyncRedisFifoStore(client(), prefix=prefix))
        from pubsub_toolkit.stores.fifo_state.redis import RedisFifoStore

        return RedisFifoStore(client(), prefix=prefix)

    server.heal()
    return Target(name, make_dedup, make_fifo, server.flush, server)


def _firestore(
    name: str, project: str, is_async: bool, view: Callable[[Any], Any], clients: list[Any]
) -> Target:
    from google.cloud import firestore

    def client() -> Any:
        made = (firestore.AsyncClient if is_async else firestore.Client)(project=project)
        clients.append(made)
        return made

    def make_dedup(clock: Clock = SYSTEM_CLOCK) -> Any:
        if is_async:
            from pubsub_toolkit.stores.dedup.firestore_async import AsyncFirestoreDedupStore

            return view(AsyncFirestoreDedupStore(client(), clock=clock))
        from pubsub_toolkit.stores.dedup.firestore import FirestoreDedupStore

        return FirestoreDedupStore(client(), clock=clock)

    def make_fifo() -> Any:
        if is_async:
            from pubsub_toolkit.stores.fifo_state.firestore_async import AsyncFirestoreFifoStore

            return view(AsyncFirestoreFifoStore(client()))
        from pubsub_toolkit.stores.fifo_state.firestore import FirestoreFifoStore

        return FirestoreFifoStore(client())

    def wipe() -> None:
        # The emulator's own endpoint: every document of the project, gone.
        host = os.environ["FIRESTORE_EMULATOR_HOST"]
        url = f"http://{host}/emulator/v1/projects/{project}/databases/(default)/documents"
        with urllib.request.urlopen(urllib.request.Request(url, method="DELETE"), timeout=10):
            pass

    return Target(name, make_dedup, make_fifo, wipe)
