"""The idempotent consumer: claim a key, run the effect once, remember its result.

``IdempotentProcessor.process(key, fingerprint, effect)`` is the whole pattern:

1. claim the key in this consumer's namespace (atomic, see :mod:`pubsub_toolkit.stores.dedup.base`);
2. a duplicate returns the stored result without running ``effect``; a different fingerprint
   under the same key is a MISMATCH (the caller dead-letters it and an alert is logged); a live
   claim elsewhere raises :class:`ClaimInProgressError` (transient: redeliver later);
3. otherwise run ``effect``; on success record ``done`` with its result, on failure release the
   claim and re-raise, so the redelivery can try again at once.

The effect runs at most once per key *as long as it finishes within the lease*. If the store
loses a ``done`` record (Redis restarted without persistence, a failover), the process that
wrote it still remembers it (:mod:`pubsub_toolkit._witness`): it records the key again, alerts,
and treats the delivery as the duplicate it is. (If the ``done`` write itself had failed - an
outage, alerted then as ``complete_failed`` - nothing was lost: the redelivery writes it late,
``recorded_late``, normally without a second alert.) An effect that
writes to Firestore can commit with the marker in one transaction instead: see
:mod:`.inbox`.

The algorithm is written once, without I/O, in :mod:`pubsub_toolkit.core.idempotent_run`;
this processor performs its effects (the store's calls, the effect, a pause) as they come, and
:class:`~.idempotent_async.AsyncIdempotentProcessor` awaits them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from functools import partial
from typing import Any, assert_never

from pubsub_toolkit._witness import Witness
from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.core import idempotent_run as protocol
from pubsub_toolkit.core.idempotent_run import Outcome, ProcessResult
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.stores.dedup.base import DedupStore

__all__ = ["IdempotentProcessor", "Outcome", "ProcessResult", "fresh_memory"]


def fresh_memory() -> protocol.Memory:
    """A processor's memory across deliveries: bounded witnesses of what it saw done and of
    the claims it released (see :class:`~pubsub_toolkit.core.idempotent_run.Memory`)."""
    return protocol.Memory(done=Witness(), released=Witness())


class IdempotentProcessor:
    """Runs each key's effect once per namespace (one namespace per consumer)."""

    def __init__(
        self,
        store: DedupStore,
        *,
        namespace: str,
        lease: timedelta,
        ttl: timedelta,
        log: DecisionLog | None = None,
        clock: Clock = SYSTEM_CLOCK,
        memory: protocol.Memory | None = None,
    ) -> None:
        """``memory``: what this process remembers of the namespace's keys - another
        driver's of the same processor (:meth:`AsyncIdempotentProcessor.driving`), else its
        own."""
        self._store = store
        self._clock = clock
        self.namespace = namespace
        self._lease = lease
        self._ttl = ttl
        self._memory = memory if memory is not None else fresh_memory()
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
            self.namespace, self._lease, self._ttl, self._clock, self._memory, log
        )

    def sibling(
        self, namespace: str, *, log: DecisionLog | None = None, ttl: timedelta | None = None
    ) -> IdempotentProcessor:
        """A processor on the same store and lease for another namespace (e.g. the one that
        makes a dead-lettering happen once however often the message is redelivered); its
        records live ``ttl``, by default as long as this processor's."""
        return IdempotentProcessor(
            self._store,
            namespace=namespace,
            lease=self._lease,
            ttl=self._ttl if ttl is None else ttl,
            log=log or DecisionLog(namespace, self.log.metrics),
            clock=self._clock,
        )

    def process(
        self,
        key: str,
        fingerprint: str,
        effect: Callable[[], str | None],
        *,
        context: Mapping[str, Any] | None = None,
    ) -> ProcessResult:
        """Run ``effect`` unless ``key`` was already processed; see the module docstring.

        ``context`` (e.g. the delivery's ``message_id``) is added to every decision logged, so
        each log line can be traced to the delivery that caused it.
        """
        # A partial, not a lambda: called once per effect, it adds no Python frame (issue 26).
        return protocol.run(
            protocol.process(self._scope, key, fingerprint, context), partial(self._perform, effect)
        )

    def _perform(self, call: Callable[[], str | None], effect: protocol.Effect) -> object:
        if isinstance(effect, protocol.ClaimKey):
            return self._store.claim(
                effect.namespace, effect.key, effect.fingerprint, lease=effect.lease, ttl=effect.ttl
            )
        if isinstance(effect, protocol.RunEffect):
            return call()
        if isinstance(effect, protocol.Complete):
            self._store.complete(
                effect.namespace, effect.key, effect.claim, effect.result, ttl=effect.ttl
            )
            return None
        if isinstance(effect, protocol.Release):
            self._store.release(effect.namespace, effect.key, effect.claim)
            return None
        if isinstance(effect, protocol.Sleep):
            self._clock.sleep(effect.seconds)
            return None
        assert_never(effect)
