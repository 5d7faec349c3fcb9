"""The inbox pattern: the handler's Firestore writes and the dedup marker commit together.

When the effect of a message is a set of Firestore writes, there is no window between "effect
done" and "marker written": both are in one transaction. A crash anywhere before the commit
leaves neither (transactions buffer writes client-side until commit), and a redelivery runs
the handler again from scratch. The marker is an ordinary ``done`` record in the same
collection as :class:`~.firestore.FirestoreDedupStore`, so both modes read alike.

Transactions on one document serialise (about 1/s on the emulator), but each message's marker
is its own document, so different keys commit in parallel.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
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
from pubsub_toolkit.errors import ClaimInProgressError, StoreUnavailableError
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
        """Run ``handler`` inside a transaction that also writes the ``done`` marker.

        ``handler`` must only write through the transaction it is given (``transaction.set``,
        ``.update``, ``.create``, ``.delete``) and may run more than once if the transaction
        is retried after contention - but only one run ever commits.
        """
        from google.cloud import firestore

        ref = self._collection.document(document_id(self.namespace, key))

        @firestore.transactional
        def run(transaction: firestore.Transaction) -> ProcessResult:
            snapshot = ref.get(transaction=transaction)
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
            result = handler(transaction)
            pending = rules.pending_record(
                self.namespace,
                key,
                fingerprint,
                rules.next_token(existing),
                now=now,
                lease=timedelta(0),
                ttl=self._ttl,
            )
            marker: dict[str, Any] = to_document(
                rules.done_record(pending, result, now=now, ttl=self._ttl)
            )
            transaction.set(ref, marker)
            return ProcessResult(Outcome.PROCESSED, result)

        try:
            outcome: ProcessResult = run(self._client.transaction(max_attempts=self._max_attempts))
        except (gexc.ServiceUnavailable, gexc.DeadlineExceeded) as exc:
            raise StoreUnavailableError(f"Firestore is unavailable: {exc}") from exc
        self._log(outcome, key, fingerprint)
        return outcome

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
