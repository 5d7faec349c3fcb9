"""The idempotent consumer for asyncio: :class:`AsyncIdempotentProcessor`.

The same pattern and semantics as :class:`~pubsub_toolkit.dedup.idempotent.IdempotentProcessor`
(claim; a duplicate returns the stored result; a different fingerprint is a MISMATCH; a live
claim elsewhere raises ClaimInProgressError; a failing effect releases the claim; ``complete``
is retried; this process's witness catches a store that lost a ``done`` record) - because it
*is* that processor's code: it runs on the event loop in a greenlet (:mod:`pubsub_toolkit._bridge`)
over an :class:`~pubsub_toolkit.stores.dedup.base.AsyncDedupStore`, awaiting the store and the
``async def`` effect. No thread is involved and the two cannot diverge.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from typing import Any

from pubsub_toolkit._bridge import SyncDedupStore, await_, loop_clock, run_sync
from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor, ProcessResult
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.stores.dedup.base import AsyncDedupStore

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
        #: The sync processor this one drives (usable only inside ``run_sync``).
        self.sync = IdempotentProcessor(
            SyncDedupStore(store),
            namespace=namespace,
            lease=lease,
            ttl=ttl,
            log=log,
            clock=loop_clock(clock),
        )

    @classmethod
    def _wrapping(
        cls, sync: IdempotentProcessor, store: AsyncDedupStore
    ) -> AsyncIdempotentProcessor:
        self = cls.__new__(cls)
        self.store, self.sync = store, sync
        return self

    @property
    def namespace(self) -> str:
        return self.sync.namespace

    @property
    def log(self) -> DecisionLog:
        return self.sync.log

    def sibling(
        self, namespace: str, *, log: DecisionLog | None = None, ttl: timedelta | None = None
    ) -> AsyncIdempotentProcessor:
        """A processor on the same store and lease for another namespace; its records live
        ``ttl``, by default as long as this processor's (see IdempotentProcessor.sibling)."""
        return self._wrapping(self.sync.sibling(namespace, log=log, ttl=ttl), self.store)

    async def process(
        self,
        key: str,
        fingerprint: str,
        effect: AsyncEffect,
        *,
        context: Mapping[str, Any] | None = None,
    ) -> ProcessResult:
        """Await ``effect()`` unless ``key`` was already processed (see IdempotentProcessor)."""
        return await run_sync(
            self.sync.process, key, fingerprint, lambda: await_(effect()), context=context
        )
