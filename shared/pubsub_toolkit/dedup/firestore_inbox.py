"""The inbox pattern: the handler's Firestore writes and the dedup marker commit together.

When the effect of a message is a set of Firestore writes, there is no window between "effect
done" and "marker written": both are in one transaction. A crash anywhere before the commit
leaves neither (transactions buffer writes client-side until commit), and a redelivery runs
the handler again from scratch. The marker is an ordinary ``done`` record in the same
collection as :class:`~.firestore.FirestoreDedupStore`, so both modes read alike.

Transactions on one document serialise (about 1/s on the emulator), but each message's marker
is its own document, so different keys commit in parallel. The marker is created without being
read first, so a crashed worker leaves no lock behind (see ``process``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as gexc

from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.dedup import rules
from pubsub_toolkit.dedup.firestore import (
    DEFAULT_COLLECTION,
    document_id,
    from_document,
    to_document,
)
from pubsub_toolkit.dedup.idempotent import Outcome, ProcessResult
from pubsub_toolkit.dedup.store import ClaimStatus
from pubsub_toolkit.errors import ClaimInProgressError
from pubsub_toolkit.firestore_calls import fail_closed, run_transaction
from pubsub_toolkit.observability import DecisionLog

if TYPE_CHECKING:
    from google.cloud import firestore

TransactionalHandler = Callable[["firestore.Transaction"], str | None]


class TransactionalInbox:
    """Exactly-once Firestore effects: ``process(key, fingerprint, handler(transaction))``."""

    def __init__(
        self,
        client: firestore.Client,
        *,
        namespace: str,
        ttl: timedelta,
        collection: str = DEFAULT_COLLECTION,
        clock: Clock = SYSTEM_CLOCK,
        log: DecisionLog | None = None,
        max_attempts: int = 10,
    ) -> None:
        self._client = client
        self._collection = client.collection(collection)
        self.namespace = namespace
        self._ttl = ttl
        self._clock = clock
        self.log = log or DecisionLog(namespace)
        self._max_attempts = max_attempts

    def process(self, key: str, fingerprint: str, handler: TransactionalHandler) -> ProcessResult:
        """Run ``handler`` inside a transaction that also creates the ``done`` marker.

        ``handler`` must only write through the transaction it is given (``transaction.set``,
        ``.update``, ``.create``, ``.delete``) and may run more than once if the transaction
        is retried after contention - but only one run ever commits.

        The marker is written with ``create`` and *not read first*: a read inside a
        transaction takes a lock that a crashed worker would hold until the transaction
        times out (60 s idle), stalling the redelivery. Creating blindly holds no lock; a
        duplicate shows up as AlreadyExists at commit, and only then is the marker read.
        """
        ref = self._collection.document(document_id(self.namespace, key))
        now = self._clock.now()
        marker = self._marker(key, fingerprint, token=1, now=now, result=None)
        try:
            result = self._commit(handler, lambda tx, r: tx.create(ref, {**marker, "result": r}))
            outcome = ProcessResult(Outcome.PROCESSED, result)
        except gexc.AlreadyExists:
            outcome = self._on_existing(ref, key, fingerprint, handler)
        self._log(outcome, key, fingerprint)
        return outcome

    def _on_existing(
        self, ref: Any, key: str, fingerprint: str, handler: TransactionalHandler
    ) -> ProcessResult:
        snapshot = fail_closed(ref.get)
        existing = from_document(snapshot.to_dict() or {}) if snapshot.exists else None
        now = self._clock.now()
        status = rules.evaluate_claim(existing, fingerprint, now)
        if status is ClaimStatus.DONE:
            return ProcessResult(Outcome.DUPLICATE, existing.result if existing else None)
        if status is ClaimStatus.MISMATCH:
            return ProcessResult(Outcome.MISMATCH)
        if status is ClaimStatus.IN_PROGRESS:
            # A two-phase claim from the non-transactional mode holds this key.
            raise ClaimInProgressError(f"{self.namespace}/{key} is claimed by a live worker")
        # The marker expired (TTL not yet applied) or is an abandoned two-phase claim:
        # replace it, on condition that nobody else replaced it first.
        marker = self._marker(
            key, fingerprint, token=rules.next_token(existing), now=now, result=None
        )
        option = self._client.write_option(last_update_time=snapshot.update_time)
        try:
            result = self._commit(
                handler, lambda tx, r: tx.update(ref, {**marker, "result": r}, option=option)
            )
        except gexc.FailedPrecondition as exc:
            raise ClaimInProgressError(f"{self.namespace}/{key} was taken concurrently") from exc
        return ProcessResult(Outcome.PROCESSED, result)

    def _commit(
        self,
        handler: TransactionalHandler,
        write_marker: Callable[[firestore.Transaction, str | None], object],
    ) -> str | None:
        from google.cloud import firestore

        @firestore.transactional
        def run(transaction: firestore.Transaction) -> str | None:
            result = handler(transaction)
            write_marker(transaction, result)
            return result

        transaction = self._client.transaction(max_attempts=self._max_attempts)
        result: str | None = run_transaction(lambda: run(transaction))
        return result

    def _marker(
        self, key: str, fingerprint: str, *, token: int, now: datetime, result: str | None
    ) -> dict[str, Any]:
        pending = rules.pending_record(
            self.namespace, key, fingerprint, token, now=now, lease=timedelta(0), ttl=self._ttl
        )
        return to_document(rules.done_record(pending, result, now=now, ttl=self._ttl))

    def _log(self, outcome: ProcessResult, key: str, fingerprint: str) -> None:
        if outcome.outcome is Outcome.MISMATCH:
            self.log.decision(
                Outcome.MISMATCH,
                "ALERT: dedup key reused with different content",
                dedup_key=key,
                level=logging.ERROR,
                alert="fingerprint_mismatch",
                fingerprint=fingerprint,
            )
        elif outcome.outcome is Outcome.DUPLICATE:
            self.log.decision(Outcome.DUPLICATE, "duplicate delivery skipped", dedup_key=key)
        else:
            self.log.decision(Outcome.PROCESSED, "processed in one transaction", dedup_key=key)
