"""The FIFO gate unit scenarios, run against :class:`AsyncFifoGate`: a stand-in for
``FifoGate`` with the same constructor and blocking methods that builds an AsyncFifoGate over
the test's memory store (as an AsyncMemoryFifoStore), turns the test's handler into an
``async def`` one, and awaits each call on an event loop of its own (a handler that calls
into a gate, as a test's "other worker" does, runs on the caller's loop: that gate's call
gets a loop in a thread of its own while the handler waits for it, as another worker would)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pubsub_toolkit.consumer.gate_async import AsyncFifoGate
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor
from pubsub_toolkit.dedup.idempotent_async import AsyncIdempotentProcessor
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.dedup.base import Claim, DedupRecord, DedupStore
from pubsub_toolkit.stores.fifo_state.memory import AsyncMemoryFifoStore, MemoryFifoStore

_OWN = {"_gate", "_async_handler"}


def as_async(handler: Callable[..., Any]) -> Callable[[Message], Coroutine[Any, Any, Any]]:
    """``handler`` as an ``async def`` handler that really suspends (once) before running."""

    async def run(message: Message) -> Any:
        await asyncio.sleep(0)
        return handler(message)  # a handler calling a gate: see call()

    return run


def call(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run ``coro`` to its end: on a loop of its own, in another thread when this one's runs
    (the handler of another gate's delivery blocks its loop until this call is done)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(1) as other_worker:
        return other_worker.submit(asyncio.run, coro).result()


class _AsyncOver:
    """A sync dedup store as the async protocol (a test's memory store never blocks)."""

    def __init__(self, store: DedupStore) -> None:
        self.store = store

    async def claim(self, namespace: str, key: str, fingerprint: str, **kw: Any) -> Claim:
        return self.store.claim(namespace, key, fingerprint, **kw)

    async def complete(
        self, namespace: str, key: str, claim: Claim, result: Any, **kw: Any
    ) -> None:
        self.store.complete(namespace, key, claim, result, **kw)

    async def release(self, namespace: str, key: str, claim: Claim) -> None:
        self.store.release(namespace, key, claim)

    async def get(self, namespace: str, key: str) -> DedupRecord | None:
        return self.store.get(namespace, key)


def as_async_records(sync: IdempotentProcessor) -> AsyncIdempotentProcessor:
    """The rejection records a sync processor gives its gate, as the asyncio gate takes them:
    the same store, namespace, lease, TTL, log and memory."""
    records = AsyncIdempotentProcessor(
        _AsyncOver(sync._store),  # type: ignore[arg-type]
        namespace=sync.namespace,
        lease=sync._lease,
        ttl=sync._ttl,
        clock=sync._clock,
    )
    records._memory = sync._memory
    records.log = sync.log  # (re)makes its scope, with that memory
    return records


class AsyncGateAsSync:
    """``FifoGate(store, consumer=..., handler=..., ...)`` made of an AsyncFifoGate."""

    batch = 1  # the asyncio gate has no batch mode

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
        return getattr(self._gate, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "_handler":  # a test swapping the handler: swap in its async twin
            value = as_async(value)
        if name == "rejections" and isinstance(value, IdempotentProcessor):
            value = as_async_records(value)  # a sync MessageProcessor's, given to its gate
        setattr(self._gate, name, value)
