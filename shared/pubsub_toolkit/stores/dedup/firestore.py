"""Firestore dedup store: ``create()`` claims, update-time preconditions for everything else.

Documents live in one collection (default ``pubsub_toolkit_dedup``) with id
``sha256(namespace, key)``, so any key is a valid id. ``expire_at`` is the field Firestore's TTL
policy deletes on (declared in terraform/). No operation uses a transaction: the emulator (and a
hot production document) serialises transactions at about one a second, whereas a precondition
on ``update_time`` is a single atomic write with exactly one winner. Concurrent writes from one
instance share commits (:mod:`._firestore_batch`).

The decisions are :mod:`.claims`' (the one claim loop of every backend); this module performs
its primitives: create-or-get is ``create()`` and, on AlreadyExists, a read; the loop's
compare-and-set is an update with an ``update_time`` precondition (a FailedPrecondition: lost,
and the loop reads again). ``complete`` is idempotent per claim by the loop's rule: a retry of a
complete whose first attempt applied but whose reply was lost fails its precondition against
its own write, and the read finds ``done`` under the claim's token - success.
"""

from __future__ import annotations

import hashlib
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from google.api_core import exceptions as gexc

from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.stores._firestore_calls import TIMEOUT, bounded_retry, fail_closed
from pubsub_toolkit.stores.dedup import claims
from pubsub_toolkit.stores.dedup._firestore_batch import GroupCommitter
from pubsub_toolkit.stores.dedup.base import DedupRecord, RecordState
from pubsub_toolkit.stores.dedup.claims import CreateOrGet, Found, Op, Replace, Reply, Stored

if TYPE_CHECKING:
    from google.cloud import firestore


DEFAULT_COLLECTION = "pubsub_toolkit_dedup"
_RETRY = bounded_retry()
T = TypeVar("T")


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


def changed_fields(record: DedupRecord, names: tuple[str, ...] | None) -> dict[str, Any]:
    """The fields ``names`` of ``record``'s document (None: all of them), for an update of only
    those. Complete and release name theirs (``claims.DONE_FIELDS``, ``RELEASED_FIELDS``): the
    other fields (namespace, key, token, fingerprint) are those of the claim's own write - the
    update_time precondition proves the document still holds them - so a smaller update mask
    is less for Firestore to apply and index."""
    document = to_document(record)
    return document if names is None else {name: document[name] for name in names}


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


class FirestoreDedupStore(claims.ClaimLoop[Any]):
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
        self._writes = GroupCommitter(client, timeout=TIMEOUT)

    def _key(self, namespace: str, key: str) -> Any:
        return self._collection.document(document_id(namespace, key))

    def _drive(self, protocol: claims.Protocol[T], ref: Any) -> T:
        """Run the claim loop's ``protocol`` on the key's document ``ref``; fail closed."""
        return fail_closed(lambda: claims.run(protocol, partial(self._perform, ref)))

    def _perform(self, ref: Any, op: Op) -> Reply:
        """One primitive of the claim loop on ``ref``."""
        if type(op) is CreateOrGet:
            try:
                written = self._create(ref, to_document(op.record))
                return Stored(written.update_time)
            except gexc.AlreadyExists:
                return found(ref.get(retry=_RETRY, timeout=TIMEOUT))
        if type(op) is Replace:
            if op.version is None:
                return None  # no update_time to compare with: the loop reads first
            document = changed_fields(op.record, op.fields)
            try:
                return Stored(self._update(ref, document, op.version).update_time)
            except gexc.FailedPrecondition:
                return None  # the document moved on: the loop reads it and decides again
        return found(ref.get(retry=_RETRY, timeout=TIMEOUT))

    def _create(self, ref: Any, document: dict[str, Any]) -> Any:
        """Create ``ref``; AlreadyExists if it exists."""
        return self._writes.write(ref.path, lambda batch: batch.create(ref, document))

    def _update(self, ref: Any, document: dict[str, Any], last_update_time: Any) -> Any:
        """Replace ``ref``'s fields if it was last written at ``last_update_time``."""
        option = self._client.write_option(last_update_time=last_update_time)
        return self._writes.write(
            ref.path, lambda batch: batch.update(ref, document, option=option)
        )


def found(snapshot: Any) -> Found:
    """The loop's view of a document snapshot: its record (None when absent) and version."""
    if not snapshot.exists:
        return Found(None)
    return Found(from_document(snapshot.to_dict() or {}), snapshot.update_time)
