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
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pubsub_toolkit._witness import Witness
from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.core.idempotency import Verdict, done_at, on_claim, retried_here
from pubsub_toolkit.errors import ClaimInProgressError, StaleClaimError, StoreUnavailableError
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.stores.dedup.base import Claim, DedupStore

logger = logging.getLogger(__name__)
_COMPLETE_RETRY_DELAYS = (0.1, 0.5, 1.5)


class Outcome(enum.StrEnum):
    """What happened to one delivery."""

    PROCESSED = "processed"
    DUPLICATE = "duplicate"
    MISMATCH = "mismatch"


@dataclass(frozen=True)
class _Done:
    """What this process remembers of an effect it ran (or found done): its result, when,
    and whether the store acknowledged the ``done`` record - then its absence is a loss."""

    result: str | None
    at: datetime
    recorded: bool


@dataclass(frozen=True)
class ProcessResult:
    """The outcome and the effect's stored result (for duplicates: the first run's result)."""

    outcome: Outcome
    result: str | None = None


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
    ) -> None:
        self._store = store
        self._clock = clock
        self.namespace = namespace
        self._lease = lease
        self._ttl = ttl
        self.log = log or DecisionLog(namespace)
        # (key, fingerprint) -> what this process saw done (by content too: an impostor under
        # the same key must not hide the original).
        self._done: Witness[tuple[str, str], _Done] = Witness()
        # key -> the token of the claim this process released after its effect failed: the
        # redelivery that takes that very claim over is a retry, not a lost worker.
        self._released: Witness[str, int] = Witness()
        self._running: set[str] = set()
        self._running_lock = threading.Lock()

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

        def log(outcome: str, text: str, **fields: Any) -> None:
            self.log.decision(outcome, text, dedup_key=key, **{**(context or {}), **fields})

        # Two deliveries of one key in this very process never run at once, whatever the
        # store says (it may have lost the first one's claim).
        with self._running_lock:
            if key in self._running:
                log("in_progress", "key is being processed by this process; retry later")
                raise ClaimInProgressError(f"{self.namespace}/{key} is running here")
            self._running.add(key)
        try:
            return self._process_claimed(key, fingerprint, effect, log)
        finally:
            with self._running_lock:
                self._running.discard(key)

    def _process_claimed(
        self,
        key: str,
        fingerprint: str,
        effect: Callable[[], str | None],
        log: Callable[..., None],
    ) -> ProcessResult:
        claim = self._store.claim(
            self.namespace, key, fingerprint, lease=self._lease, ttl=self._ttl
        )
        remembered = self._done.get((key, fingerprint)) if claim.owns_key else None
        verdict = on_claim(
            claim.status,
            remembered_at=remembered.at if remembered is not None else None,
            now=self._clock.now(),
            ttl=self._ttl,
        )
        if verdict is Verdict.DUPLICATE:
            log(Outcome.DUPLICATE, "duplicate delivery skipped")
            result = claim.record.result if claim.record else None
            # Remember when the STORE's record was done (its TTL runs from then), not now.
            at = done_at(claim.record.expire_at, self._ttl) if claim.record else self._clock.now()
            self._done.put((key, fingerprint), _Done(result, at, recorded=True))
            return ProcessResult(Outcome.DUPLICATE, result)
        if verdict is Verdict.RECORD_AGAIN:
            assert remembered is not None
            return self._record_again((key, fingerprint), claim, remembered, log)
        if verdict is Verdict.MISMATCH:
            log(
                Outcome.MISMATCH,
                "ALERT: dedup key reused with different content",
                level=logging.ERROR,
                alert="fingerprint_mismatch",
                fingerprint=fingerprint,
                stored_fingerprint=claim.record.fingerprint if claim.record else None,
            )
            return ProcessResult(Outcome.MISMATCH)
        if verdict is Verdict.IN_PROGRESS:
            log("in_progress", "key is being processed elsewhere; retry later")
            raise ClaimInProgressError(f"{self.namespace}/{key} is claimed by a live worker")
        if verdict is Verdict.TAKE_OVER:
            retry = retried_here(self._released.get(key), claim.token)
            log(
                "taken_over",
                "claim released here after the effect failed; running it again"
                if retry
                else "previous holder's claim ended (its lease expired, or it released the key "
                "after a failure); taking over",
                level=logging.INFO if retry else logging.WARNING,
                token=claim.token,
            )
        try:
            result = effect()
        except BaseException:
            self._release_after_failure(key, claim)
            raise
        # Remembered before the store is told: if recording fails (or the store loses it),
        # this process still knows the effect happened and will not run it again.
        done = _Done(result, self._clock.now(), recorded=False)
        self._done.put((key, fingerprint), done)
        try:
            self._complete(key, claim, result)
            self._done.put((key, fingerprint), dataclasses.replace(done, recorded=True))
        except StaleClaimError:
            log(
                "fenced",
                "ALERT: effect ran after our lease expired and another worker took over",
                level=logging.ERROR,
                token=claim.token,
            )
            raise
        log(Outcome.PROCESSED, "processed")
        return ProcessResult(Outcome.PROCESSED, result)

    def _record_again(
        self, remembered: tuple[str, str], claim: Claim, done: _Done, log: Callable[..., None]
    ) -> ProcessResult:
        """The store has no ``done`` record for an effect this process ran: write it (again),
        never rerun. Lost writes if the store had acknowledged it; else its ``complete`` failed
        (an outage, said then as ``complete_failed``) and this is, most likely, the late write
        (a write applied just before its timeout, then lost, is indistinguishable from it)."""
        key = remembered[0]
        if done.recorded:
            log(
                "store_rollback",
                "ALERT: the store lost this key's done record; not run again",
                level=logging.ERROR,
                alert="store_rollback",
            )
        else:
            log(
                "recorded_late",
                "effect ran here before its done record could be written; recording it now, "
                "not run again",
                level=logging.WARNING,
            )
        # Someone else may hold it by now: they find it done, or run it under a newer lease.
        with contextlib.suppress(StaleClaimError):
            self._complete(key, claim, done.result)
            # Acknowledged now: should the store lose it later, that is a loss to alert on.
            self._done.put(remembered, dataclasses.replace(done, recorded=True))
        return ProcessResult(Outcome.DUPLICATE, done.result)

    def _complete(self, key: str, claim: Claim, result: str | None) -> None:
        # The effect has happened: losing the "done" write now would let a redelivery run it
        # again once the lease expires, so a store hiccup is worth a few quick retries.
        for delay in (*_COMPLETE_RETRY_DELAYS, None):
            try:
                self._store.complete(self.namespace, key, claim, result, ttl=self._ttl)
                return
            except StoreUnavailableError:
                if delay is None:
                    self.log.decision(
                        "complete_failed",
                        "ALERT: effect done but not recorded; a redelivery after the lease "
                        "may repeat it",
                        dedup_key=key,
                        level=logging.ERROR,
                    )
                    raise
                self._clock.sleep(delay)

    def _release_after_failure(self, key: str, claim: Claim) -> None:
        # Never let a failing release hide the effect's own exception.
        try:
            self._store.release(self.namespace, key, claim)
            self._released.put(key, claim.token)
        except Exception:
            logger.exception(
                "could not release %s/%s; it frees when the lease ends", self.namespace, key
            )
        self.log.decision(
            "effect_failed",
            "effect raised; claim released for redelivery",
            dedup_key=key,
            level=logging.WARNING,
        )
