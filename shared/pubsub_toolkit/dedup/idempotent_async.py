"""The idempotent consumer for asyncio: :class:`AsyncIdempotentProcessor`.

The same pattern and semantics as :class:`~pubsub_toolkit.dedup.idempotent.IdempotentProcessor`
(claim; a duplicate returns the stored result; a different fingerprint is a MISMATCH; a live
claim elsewhere raises ClaimInProgressError; a failing effect releases the claim; ``complete``
is retried; this process's witness catches a store that lost a ``done`` record) - because both
drive the one protocol of :mod:`pubsub_toolkit.core.idempotent_run`: this one awaits each effect
it yields (the :class:`~pubsub_toolkit.stores.dedup.base.AsyncDedupStore`'s calls, the
``async def`` effect, a pause) in the caller's task. No thread and no greenlet are involved,
and the two cannot diverge.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from typing import Any, assert_never

from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock, SystemClock
from pubsub_toolkit.core import idempotent_run as protocol
from pubsub_toolkit.core.idempotent_run import ProcessResult
from pubsub_toolkit.dedup.idempotent import fresh_memory
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.stores.dedup.base import AsyncDedupStore

__all__ = ["AsyncEffect", "AsyncIdempotentProcessor", "ProcessResult"]

AsyncEffect = Callable[[], Awaitable[str | None]]


class AsyncIdempotentProcessor:
    """Runs each key's ``async`` effect once per namespace (one namespace per consumer)."""

    def __init__(
        self,
        store: AsyncDedupStore,
        *,
        namespace: str,
        lease: timedelta,
        ttl: timedelta,
        log: DecisionLog | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.store = store
        self.clock = clock
        self.namespace = namespace
        self._lease = lease
        self._ttl = ttl
        self._memory = fresh_memory()
        self.log = log or DecisionLog(namespace)  # (also makes the protocol's scope)

    @property
    def log(self) -> DecisionLog:
        """Where this processor's decisions are logged."""
        return self._log

    @log.setter
    def log(self, log: DecisionLog) -> None:
        self._log = log
        # Made once, not per delivery: the protocol's view of this processor.
        self._scope = protocol.Scope(
            self.namespace, self._lease, self._ttl, self.clock, self._memory, log
        )

    def sibling(
        self, namespace: str, *, log: DecisionLog | None = None, ttl: timedelta | None = None
    ) -> AsyncIdempotentProcessor:
        """A processor on the same store and lease for another namespace; its records live
        ``ttl``, by default as long as this processor's (see IdempotentProcessor.sibling)."""
        return AsyncIdempotentProcessor(
            self.store,
            namespace=namespace,
            lease=self._lease,
            ttl=self._ttl if ttl is None else ttl,
            log=log or DecisionLog(namespace, self.log.metrics),
            clock=self.clock,
        )

    async def process(
        self,
        key: str,
        fingerprint: str,
        effect: AsyncEffect,
        *,
        context: Mapping[str, Any] | None = None,
    ) -> ProcessResult:
        """Await ``effect()`` unless ``key`` was already processed (see IdempotentProcessor)."""
        return await protocol.run_async(
            protocol.process(self._scope, key, fingerprint, context),
            lambda effect_: self._perform(effect_, effect),
        )

    async def _perform(self, effect: protocol.Effect, call: AsyncEffect) -> object:
        if isinstance(effect, protocol.ClaimKey):
            return await self.store.claim(
                effect.namespace, effect.key, effect.fingerprint, lease=effect.lease, ttl=effect.ttl
            )
        if isinstance(effect, protocol.Complete):
            await self.store.complete(
                effect.namespace, effect.key, effect.claim, effect.result, ttl=effect.ttl
            )
            return None
        if isinstance(effect, protocol.Release):
            await self.store.release(effect.namespace, effect.key, effect.claim)
            return None
        if isinstance(effect, protocol.RunEffect):
            return await call()
        if isinstance(effect, protocol.Sleep):
            # The loop keeps running other deliveries; a test's manual clock just moves.
            if isinstance(self.clock, SystemClock):
                await asyncio.sleep(effect.seconds)
            else:
                self.clock.sleep(effect.seconds)
            return None
        assert_never(effect)
