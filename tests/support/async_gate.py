"""The FIFO gate unit scenarios, run against :class:`AsyncFifoGate`: a stand-in for
``FifoGate`` with the same constructor and blocking methods that builds an AsyncFifoGate over
the test's memory store (as an AsyncMemoryFifoStore), turns the test's handler into an
``async def`` one, and awaits each call on an event loop (the loop the caller is on, when a
handler calls into a gate, as a test's "other worker" does)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from pubsub_toolkit._bridge import await_, in_bridge, run_sync
from pubsub_toolkit.consumer.gate_async import AsyncFifoGate
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.fifo_state.memory import AsyncMemoryFifoStore, MemoryFifoStore

_OWN = {"_gate", "_async_handler"}


def as_async(handler: Callable[..., Any]) -> Callable[[Message], Coroutine[Any, Any, Any]]:
    """``handler`` as an ``async def`` handler that really suspends (once) before running."""

    async def run(message: Message) -> Any:
        await asyncio.sleep(0)
        # In its own greenlet, so a handler that calls a gate (blocking view) awaits it here.
        return await run_sync(handler, message)

    return run


def call(coro: Coroutine[Any, Any, Any]) -> Any:
    return await_(coro) if in_bridge() else asyncio.run(coro)


class AsyncGateAsSync:
    """``FifoGate(store, consumer=..., handler=..., ...)`` made of an AsyncFifoGate."""

    def __init__(self, store: MemoryFifoStore, *, handler: Callable[..., Any], **kwargs: Any):
        if kwargs.pop("transactional_handler", None) is not None:
            raise NotImplementedError("the transactional mode is sync-only")
        gate = AsyncFifoGate(AsyncMemoryFifoStore(store=store), handler=as_async(handler), **kwargs)
        object.__setattr__(self, "_gate", gate)

    def deliver(self, message: Message, group: str, seq: int) -> Any:
        return call(self._gate.deliver(message, group, seq))

    def sweep(self, group: str) -> Any:
        return call(self._gate.sweep(group))

    def skip(self, group: str, seq: int, *, run: bool = True) -> Any:
        return call(self._gate.skip(group, seq, run=run))

    def replay(self, group: str, *, run: bool = True) -> Any:
        return call(self._gate.replay(group, run=run))

    def groups(self) -> Any:
        return call(self._gate.groups())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._gate.sync, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "_handler":  # a test swapping the handler: swap in its async twin
            from pubsub_toolkit._bridge import awaiting

            self._gate._handler = as_async(value)  # the gate's own (native) path
            value = awaiting(as_async(value))  # and its sync view's, the processor's
        setattr(self._gate.sync, name, value)
