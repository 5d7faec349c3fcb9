"""One orchestration, two drivers: the toolkit's sync logic run on an event loop, awaiting.

The dedup processor, the FIFO gate and the message processor are one state machine each,
written once (sync) over pure rules (:mod:`pubsub_toolkit.stores.dedup.rules`,
:mod:`pubsub_toolkit.consumer.gate_rules`). Their async twins do not copy that orchestration
(two copies of an 800-line gate would drift): they run the same code inside a greenlet on the
event loop's own thread, and every place it touches I/O - a store call, the handler, a wait -
hands an awaitable back to the loop with :func:`await_` and is resumed with its result. It is
the technique SQLAlchemy's asyncio extension uses. Nothing runs on another thread and nothing
blocks the loop: while one delivery awaits Redis, the loop runs the others.

* :func:`run_sync` (awaited on the loop) runs ``fn`` in a new greenlet and awaits what it asks;
* :func:`await_` (called inside ``fn``) suspends it until the awaitable is done;
* :class:`LoopClock` makes a clock's ``sleep`` an ``asyncio.sleep`` inside ``fn``.

The stores' async protocols (``AsyncDedupStore``, ``AsyncFifoStore``) are native async
(``redis.asyncio``, Firestore's ``AsyncClient``); :class:`SyncDedupStore` and
:class:`SyncFifoStore` present them to the sync orchestration through :func:`await_`.

``greenlet`` (a dependency of the ``asyncio`` extra) is imported on first use.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from pubsub_toolkit._extras import import_optional
from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock, SystemClock

if TYPE_CHECKING:
    from pubsub_toolkit.message import Message
    from pubsub_toolkit.stores.dedup.base import AsyncDedupStore, Claim, DedupRecord
    from pubsub_toolkit.stores.fifo_state.base import AsyncFifoStore, GroupState

T = TypeVar("T")
_MARK = "_pubsub_toolkit_bridge"


def _greenlet() -> Any:
    return import_optional("greenlet", extra="asyncio", needed_by="async handlers")


async def run_sync(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ``fn(*args, **kwargs)`` on this loop; each :func:`await_` inside it is awaited here."""
    greenlet = _greenlet()
    child = greenlet.greenlet(fn, greenlet.getcurrent())
    setattr(child, _MARK, True)
    child.gr_context = contextvars.copy_context()  # the task's context vars, as a call would see
    request = child.switch(*args, **kwargs)
    while not child.dead:
        try:
            value = await request
        except BaseException:
            request = child.throw(*sys.exc_info())
        else:
            request = child.switch(value)
    result: T = request
    return result


def in_bridge() -> bool:
    """True inside a :func:`run_sync` call (where :func:`await_` may be used)."""
    if "greenlet" not in sys.modules:
        return False
    return bool(getattr(sys.modules["greenlet"].getcurrent(), _MARK, False))


def await_(awaitable: Awaitable[T]) -> T:
    """Inside :func:`run_sync`: suspend until ``awaitable`` is done on the loop; its result."""
    current = _greenlet().getcurrent()
    if not getattr(current, _MARK, False):
        if asyncio.iscoroutine(awaitable):
            awaitable.close()  # never awaited: say why, without a second warning
        raise RuntimeError("await_() called outside run_sync(): an async store needs its loop")
    result: T = current.parent.switch(awaitable)
    return result


class LoopClock:
    """``clock`` whose ``sleep`` awaits ``asyncio.sleep`` (inside :func:`run_sync`) instead of
    blocking the loop; a test's manual clock keeps its own sleep (it just moves)."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock = clock

    def now(self) -> datetime:
        return self.clock.now()

    def sleep(self, seconds: float) -> None:
        if isinstance(self.clock, SystemClock):
            await_(asyncio.sleep(seconds))
        else:
            self.clock.sleep(seconds)


def loop_clock(clock: Clock) -> Clock:
    return clock if isinstance(clock, LoopClock) else LoopClock(clock)


class SyncDedupStore:
    """An :class:`AsyncDedupStore` as the sync ``DedupStore`` protocol, inside :func:`run_sync`."""

    def __init__(self, store: AsyncDedupStore) -> None:
        self.store = store

    def claim(
        self, namespace: str, key: str, fingerprint: str, *, lease: timedelta, ttl: timedelta
    ) -> Claim:
        return await_(self.store.claim(namespace, key, fingerprint, lease=lease, ttl=ttl))

    def complete(
        self, namespace: str, key: str, claim: Claim, result: str | None, *, ttl: timedelta
    ) -> None:
        await_(self.store.complete(namespace, key, claim, result, ttl=ttl))

    def release(self, namespace: str, key: str, claim: Claim) -> None:
        await_(self.store.release(namespace, key, claim))

    def get(self, namespace: str, key: str) -> DedupRecord | None:
        return await_(self.store.get(namespace, key))


class SyncFifoStore:
    """An :class:`AsyncFifoStore` as the sync ``FifoStore`` protocol, inside :func:`run_sync`."""

    def __init__(self, store: AsyncFifoStore) -> None:
        self.store = store

    def load(self, consumer: str, group: str) -> GroupState:
        return await_(self.store.load(consumer, group))

    def save(
        self, consumer: str, group: str, state: GroupState, expected: GroupState
    ) -> GroupState | None:
        return await_(self.store.save(consumer, group, state, expected))

    def park(self, consumer: str, group: str, seq: int, message: Message) -> None:
        await_(self.store.park(consumer, group, seq, message))

    def parked_message(self, consumer: str, group: str, seq: int) -> Message | None:
        return await_(self.store.parked_message(consumer, group, seq))

    def unpark(self, consumer: str, group: str, seq: int) -> None:
        await_(self.store.unpark(consumer, group, seq))

    def groups(self, consumer: str) -> list[str]:
        return await_(self.store.groups(consumer))


def awaiting(handler: Callable[..., Awaitable[T]]) -> Callable[..., T]:
    """An async ``handler`` as a sync callable for the orchestration (inside :func:`run_sync`)."""

    def call(*args: Any) -> T:
        return await_(handler(*args))

    return call
