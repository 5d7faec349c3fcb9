"""Firestore dedup store: ``create()`` claims, update-time preconditions for everything else.

Documents live in one collection (default ``pubsub_toolkit_dedup``) with id
``sha256(namespace, key)``, so any key is a valid id. ``expire_at`` is the field Firestore's TTL
policy deletes on (declared in terraform/). No operation uses a transaction: the emulator (and a
hot production document) serialises transactions at about one a second, whereas a precondition
on ``update_time`` is a single atomic write with exactly one winner. Concurrent writes from one
instance share commits (:mod:`._firestore_batch`).

``complete`` is idempotent per claim. Its write carries an ``update_time`` precondition, so a
retry of a complete whose first attempt applied but whose reply was lost (the client's own
retry inside the commit, or IdempotentProcessor's) fails that precondition against its own
write. The store then reads the record: ``done`` under the claim's token is that first
attempt, reported as success - refusing it would log a false "effect ran after our lease
expired" alert and get a finished message redelivered. ``done`` or ``pending`` under another
token is a newer holder's: StaleClaimError. ``release`` never replaces a done record.
"""

from __future__ import annotations

import contextlib
import hashlib
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as gexc

from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.errors import StaleClaimError
from pubsub_toolkit.stores._firestore_calls import TIMEOUT, bounded_retry, fail_closed
from pubsub_toolkit.stores.dedup import rules
from pubsub_toolkit.stores.dedup._firestore_batch import GroupCommitter
from pubsub_toolkit.stores.dedup.base import Claim, ClaimStatus, DedupRecord, RecordState

if TYPE_CHECKING:
    from google.cloud import firestore


DEFAULT_COLLECTION = "pubsub_toolkit_dedup"
_TIMEOUT = TIMEOUT
_RETRY = bounded_retry()


def document_id(namespace: str, key: str) -> str:
    """A valid, fixed-length document id for any namespace and key."""
    return hashlib.sha256(f"{namespace}\x00{key}".encode()).hexdigest()


def to_document(record: DedupRecord) -> dict[str, Any]:
    return {
        "namespace": record.namespace,
        "key": record.key,
        "state": record.state.value,
        "token": record.token,
        "fingerprint": record.fingerprint,
        "lease_until": record.lease_until,
        "expire_at": record.expire_at,
        "result": record.result,
    }


# What complete and release change. The other fields (namespace, key, token, fingerprint) are
# those of the claim's own write - the update_time precondition, or the token check after a
# re-read, proves the document still holds them - so rewriting them is work for nothing: a
# smaller update mask is less for Firestore to apply and index, and less for the client to
# encode.
DONE_FIELDS = ("state", "lease_until", "expire_at", "result")
RELEASED_FIELDS = ("lease_until",)


def changed_fields(record: DedupRecord, names: tuple[str, ...]) -> dict[str, Any]:
    """The fields ``names`` of ``record``'s document (for an update of only those)."""
    document = to_document(record)
    return {name: document[name] for name in names}


def from_document(doc: dict[str, Any]) -> DedupRecord:
    return DedupRecord(
        namespace=doc["namespace"],
        key=doc["key"],
        state=RecordState(doc["state"]),
        token=int(doc["token"]),
        fingerprint=doc["fingerprint"],
        lease_until=doc.get("lease_until"),
        expire_at=doc["expire_at"],
        result=doc.get("result"),
    )


class FirestoreDedupStore:
    """Two-phase dedup records in a Firestore collection."""

    def __init__(
        self,
        client: firestore.Client,
        *,
        collection: str = DEFAULT_COLLECTION,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._client = client
        self._collection = client.collection(collection)
        self._clock = clock
        self._writes = GroupCommitter(client, timeout=_TIMEOUT)

    def claim(
        self, namespace: str, key: str, fingerprint: str, *, lease: timedelta, ttl: timedelta
    ) -> Claim:
        return fail_closed(lambda: self._claim(namespace, key, fingerprint, lease, ttl))

    def _claim(
        self, namespace: str, key: str, fingerprint: str, lease: timedelta, ttl: timedelta
    ) -> Claim:
        ref = self._collection.document(document_id(namespace, key))
        while True:
            now = self._clock.now()
            fresh = rules.pending_record(
                namespace, key, fingerprint, 1, now=now, lease=lease, ttl=ttl
            )
            try:
                written = self._create(ref, to_document(fresh))
                return Claim(ClaimStatus.ACQUIRED, 1, fresh, version=written.update_time)
            except gexc.AlreadyExists:
                pass
            snapshot = ref.get(retry=_RETRY, timeout=_TIMEOUT)
            if not snapshot.exists:
                continue  # deleted (TTL) between create and get: try to create again
            existing = from_document(snapshot.to_dict() or {})
            status = rules.evaluate_claim(existing, fingerprint, now)
            if status not in (ClaimStatus.ACQUIRED, ClaimStatus.TAKEN_OVER):
                return Claim(status, existing.token, existing)
            record = rules.pending_record(
                namespace,
                key,
                fingerprint,
                rules.next_token(existing),
                now=now,
                lease=lease,
                ttl=ttl,
            )
            try:
                written = self._update(ref, to_document(record), snapshot.update_time)
                return Claim(status, record.token, record, version=written.update_time)
            except gexc.FailedPrecondition:
                continue  # another contender won the takeover: look again

    def complete(
        self, namespace: str, key: str, claim: Claim, result: str | None, *, ttl: timedelta
    ) -> None:
        if claim.record is None:
            raise StaleClaimError(f"claim on {namespace}/{key} carries no record")
        done = rules.done_record(claim.record, result, now=self._clock.now(), ttl=ttl)
        fail_closed(
            lambda: self._replace_if_token(
                namespace, key, claim, changed_fields(done, DONE_FIELDS), done_is_ours=True
            )
        )

    def release(self, namespace: str, key: str, claim: Claim) -> None:
        if claim.record is None:
            return
        released = rules.released_record(claim.record, now=self._clock.now())
        # A StaleClaimError means someone else holds the key now: nothing of ours to release.
        with contextlib.suppress(StaleClaimError):
            fail_closed(
                lambda: self._replace_if_token(
                    namespace,
                    key,
                    claim,
                    changed_fields(released, RELEASED_FIELDS),
                    done_is_ours=False,
                )
            )

    def _replace_if_token(
        self,
        namespace: str,
        key: str,
        claim: Claim,
        document: dict[str, Any],
        *,
        done_is_ours: bool,
    ) -> None:
        """Write ``document`` (changed fields) while the record is ``pending`` under
        ``claim.token``.

        With ``done_is_ours`` (complete), a record already done under our token counts as
        written: it is our own earlier attempt.
        """
        ref = self._collection.document(document_id(namespace, key))
        if claim.version is not None:
            # Fast path: nothing changed since our own claim write, so no read is needed.
            try:
                self._update(ref, document, claim.version)
                return
            except gexc.FailedPrecondition:
                pass  # the document moved on; check below whether we still hold it
        while True:
            snapshot = ref.get(retry=_RETRY, timeout=_TIMEOUT)
            current = from_document(snapshot.to_dict() or {}) if snapshot.exists else None
            if current is None or current.token != claim.token:
                raise StaleClaimError(f"claim {claim.token} on {namespace}/{key} is no longer held")
            if current.state is RecordState.DONE:
                if done_is_ours:
                    return  # our first attempt applied; its reply was lost
                raise StaleClaimError(f"claim {claim.token} on {namespace}/{key} is already done")
            try:
                self._update(ref, document, snapshot.update_time)
                return
            except gexc.FailedPrecondition:
                continue

    def _create(self, ref: Any, document: dict[str, Any]) -> Any:
        """Create ``ref``; AlreadyExists if it exists."""
        return self._writes.write(ref.path, lambda batch: batch.create(ref, document))

    def _update(self, ref: Any, document: dict[str, Any], last_update_time: Any) -> Any:
        """Replace ``ref``'s fields if it was last written at ``last_update_time``."""
        option = self._client.write_option(last_update_time=last_update_time)
        return self._writes.write(
            ref.path, lambda batch: batch.update(ref, document, option=option)
        )

    def get(self, namespace: str, key: str) -> DedupRecord | None:
        ref = self._collection.document(document_id(namespace, key))
        snapshot = fail_closed(lambda: ref.get(retry=_RETRY, timeout=_TIMEOUT))
        if not snapshot.exists:
            return None
        record = from_document(snapshot.to_dict() or {})
        return None if record.is_expired(self._clock.now()) else record
