"""The inbox pattern: the handler's Firestore writes and the dedup marker commit together.

When the effect of a message is a set of Firestore writes, there is no window between "effect
done" and "marker written": both are in one transaction. A crash anywhere before the commit
leaves neither (transactions buffer writes client-side until commit), and a redelivery runs
the handler again from scratch. The marker is an ordinary ``done`` record in the same
collection as :class:`~pubsub_toolkit.stores.dedup.firestore.FirestoreDedupStore`, so both
modes read alike.

Transactions on one document serialise (about 1/s on the emulator), but each message's marker
is its own document, so different keys commit in parallel. The marker is created without being
read first, so a crashed worker leaves no lock behind (see ``process``).

A failed commit is judged by the marker, never by the exception type. The obvious signal - a
duplicate's ``create`` fails with AlreadyExists - is not reliable: the client rolls back after
the failed commit, and when that rollback fails (the server may already have closed the
transaction) its error replaces AlreadyExists, so a duplicate would look like an outage and be
redelivered forever. So after any commit failure that is not the handler's own exception the
marker is read: ours (its ``commit_id`` is this attempt's: the commit applied, its reply was
lost) → processed; done → duplicate; another fingerprint → mismatch; a live two-phase claim →
in progress; expired or abandoned → taken over; no marker → nothing committed, fail
transiently (StoreUnavailableError) and let the delivery come again.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.core.idempotency import Verdict, on_claim
from pubsub_toolkit.dedup.idempotent import Outcome, ProcessResult
from pubsub_toolkit.errors import ClaimInProgressError, StoreUnavailableError
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.stores._firestore_calls import (
    TIMEOUT,
    CommitUncertainError,
    bounded_retry,
    fail_closed,
    run_in_transaction,
)
from pubsub_toolkit.stores.dedup import rules
from pubsub_toolkit.stores.dedup.firestore import (
    DEFAULT_COLLECTION,
    document_id,
    from_document,
    to_document,
)

if TYPE_CHECKING:
    from google.cloud import firestore

TransactionalHandler = Callable[["firestore.Transaction"], str | None]
# Which commit wrote the marker: a marker carrying ours is our own commit, applied although
# its reply was lost. The dedup store ignores the field.
COMMIT_ID_FIELD = "commit_id"
# An expired marker taken over concurrently by others this many times in a row: retry later.
_TAKEOVER_ATTEMPTS = 3
_TIMEOUT = TIMEOUT
_RETRY = bounded_retry()


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
        duplicate makes the commit fail, and only then is the marker read (outside any
        transaction) to decide what the failure meant.
        """
        outcome = self._process(key, fingerprint, handler)
        self._log(outcome, key, fingerprint)
        return outcome

    def _process(self, key: str, fingerprint: str, handler: TransactionalHandler) -> ProcessResult:
        ref = self._collection.document(document_id(self.namespace, key))
        found: Any = None  # the marker's snapshot once a commit has failed on it
        for _ in range(_TAKEOVER_ATTEMPTS):
            commit_id = uuid.uuid4().hex
            token = 1 if found is None else rules.next_token(from_document(found.to_dict()))
            marker = {
                **self._marker(key, fingerprint, token=token, now=self._clock.now(), result=None),
                COMMIT_ID_FIELD: commit_id,
            }
            try:
                result = self._commit(ref, found, handler, marker)
            except CommitUncertainError as failed:
                found = fail_closed(lambda: ref.get(retry=_RETRY, timeout=_TIMEOUT))
                if not found.exists:
                    raise StoreUnavailableError(
                        f"{self.namespace}/{key}: commit failed and no marker exists, so "
                        f"nothing was committed; deliver again ({failed.__cause__!r})"
                    ) from failed
                decided = self._decide(found.to_dict() or {}, key, fingerprint, commit_id)
                if decided is not None:
                    return decided
                continue  # expired or abandoned: take it over, on condition nobody did first
            return ProcessResult(Outcome.PROCESSED, result)
        raise ClaimInProgressError(f"{self.namespace}/{key} was taken over concurrently")

    def _decide(
        self, document: dict[str, Any], key: str, fingerprint: str, commit_id: str
    ) -> ProcessResult | None:
        """What an existing marker means after our commit failed; None: take it over."""
        existing = from_document(document)
        if document.get(COMMIT_ID_FIELD) == commit_id:
            return ProcessResult(Outcome.PROCESSED, existing.result)  # ours; the reply was lost
        verdict = on_claim(rules.evaluate_claim(existing, fingerprint, self._clock.now()))
        if verdict is Verdict.DUPLICATE:
            return ProcessResult(Outcome.DUPLICATE, existing.result)
        if verdict is Verdict.MISMATCH:
            return ProcessResult(Outcome.MISMATCH)
        if verdict is Verdict.IN_PROGRESS:
            # A two-phase claim from the non-transactional mode holds this key.
            raise ClaimInProgressError(f"{self.namespace}/{key} is claimed by a live worker")
        return None  # expired (TTL not yet applied) or an abandoned two-phase claim

    def _commit(
        self, ref: Any, found: Any, handler: TransactionalHandler, marker: dict[str, Any]
    ) -> str | None:
        """Run ``handler`` and write ``marker`` in one transaction: ``create`` it if nothing was
        found, else replace ``found`` on condition that it is unchanged."""
        option = (
            None if found is None else self._client.write_option(last_update_time=found.update_time)
        )

        def body(transaction: firestore.Transaction) -> str | None:
            result = handler(transaction)
            if option is None:
                transaction.create(ref, {**marker, "result": result})
            else:
                transaction.update(ref, {**marker, "result": result}, option=option)
            return result

        return run_in_transaction(self._client, body, max_attempts=self._max_attempts)

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
