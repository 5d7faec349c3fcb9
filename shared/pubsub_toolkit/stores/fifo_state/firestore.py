"""Firestore FIFO gate store: update-time preconditions for the CAS, a subcollection for parking.

One document per ``(consumer, group)`` in one collection (default
``pubsub_toolkit_fifo_state``), id ``sha256(consumer NUL group)`` so any names are valid. It holds
the whole :class:`~pubsub_toolkit.stores.fifo_state.base.GroupState` as one JSON string
(``state``), plus ``consumer``, ``group``, ``last_processed`` and ``listed`` as plain fields for
operators and for the ``groups()`` queries (equality filters only: Firestore merges the
single-field indexes, no composite index needed). ``listed`` is ``base.listed(state)``: the
sweeper's queries read the groups that need attention, not every group ever seen.

The CAS version is the document's ``update_time``. ``save`` is ``create()`` for a first write
(AlreadyExists = lost) and otherwise ``update()`` with a ``last_update_time`` precondition
(FailedPrecondition = lost): one atomic write, exactly one winner, no transaction (colliding
transactions on one document run about one a second on the emulator and in production).

Two details keep the CAS strict:

* Firestore leaves ``update_time`` unchanged when a write does not change the document, so two
  writers of identical content from one version would both "win". Every save therefore writes a
  fresh ``write_id``: the document always changes, and so does its version.
* A write retried after a transient error may find its own first attempt already applied and
  fail its precondition. Only in that case the store reads ``write_id`` back and reports the
  save as won, rather than leaving the gate to think someone else holds a lease it took.

A complete or idle group's state document also carries ``expire_at`` (a timestamp; null while
the group needs attention), the field a Firestore **TTL policy on the collection group
``pubsub_toolkit_fifo_state``** deletes on: the deploy must declare that policy, or finished
and idle groups stay for good (harmless, but never cleaned up). Firestore deletes expired documents
some time after ``expire_at`` (typically within a day), never before, so the tombstone lasts at
least as long as the gate asked. A TTL deletion does not reach subcollections: parked copies
are unparked before a group completes (or settled by the next sweep), so none should remain.

Parked messages are documents in the subcollection ``parked`` of the state document, id = the
zero-padded seq (so they list in order), created with ``create()``: AlreadyExists means the
first copy is kept. Every call has a bounded retry and fails closed (StoreUnavailableError).

(About 310 lines: the compare-and-set, parking, the sweeper's queries and the transactional
commit all share the document layout above, so they stay in one module.)
"""

from __future__ import annotations

import contextlib
import hashlib
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from pubsub_toolkit.errors import StaleClaimError, StoreUnavailableError
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores._firestore_calls import (
    TIMEOUT,
    UNAVAILABLE,
    CommitUncertainError,
    bounded_retry,
    fail_closed,
    read_all,
    run_in_transaction,
)
from pubsub_toolkit.stores.fifo_state.base import (
    GroupState,
    decode_message,
    encode_message,
    listed,
)

DEFAULT_COLLECTION = "pubsub_toolkit_fifo_state"
PARKED_COLLECTION = "parked"
STATE_FIELD = "state"
WRITE_ID_FIELD = "write_id"
# A complete group's tombstone time: the deploy's TTL policy on this collection deletes on it.
EXPIRE_AT_FIELD = "expire_at"
# base.listed(state), for the sweeper's query (expire_at itself has no index: the deploy removes
# it, an increasing timestamp is a write hotspot). A record written before this field existed is
# listed again by its next write.
LISTED_FIELD = "listed"
_RETRY = bounded_retry()
# A lost CAS answers AlreadyExists (create) or FailedPrecondition (update); NotFound if the
# document was deleted since it was read.
_CONFLICT = (gexc.AlreadyExists, gexc.FailedPrecondition, gexc.NotFound)
# Transactional commits that find the state changed by someone else, before giving up for now.
_COMMIT_ATTEMPTS = 5


def document_id(consumer: str, group: str) -> str:
    """A valid, fixed-length document id for any consumer and group."""
    return hashlib.sha256(f"{consumer}\x00{group}".encode()).hexdigest()


def parked_id(seq: int) -> str:
    """A parked message's document id: zero-padded so ids sort like numbers."""
    return f"{seq:020d}"


def state_fields(state: GroupState, write_id: str) -> dict[str, Any]:
    """What every write of ``state`` sets (always all of it: an update leaves unnamed fields
    as they were, so ``expire_at`` is written null while the group is open)."""
    return {
        "last_processed": state.last_processed,
        STATE_FIELD: state.to_json(),
        WRITE_ID_FIELD: write_id,
        EXPIRE_AT_FIELD: state.expire_at,
        LISTED_FIELD: listed(state),
    }


def parked_document(consumer: str, group: str, seq: int, message: Message) -> dict[str, Any]:
    return {"consumer": consumer, "group": group, "seq": seq, "message": encode_message(message)}


class DocumentLayout:
    """The documents of the module docstring, for the sync and the asyncio store alike (each
    sees the other's state)."""

    def __init__(self, client: Any, *, collection: str = DEFAULT_COLLECTION) -> None:
        self._client = client
        self._collection = client.collection(collection)

    def _ref(self, consumer: str, group: str) -> Any:
        return self._collection.document(document_id(consumer, group))

    def _parked_ref(self, consumer: str, group: str, seq: int) -> Any:
        return self._ref(consumer, group).collection(PARKED_COLLECTION).document(parked_id(seq))

    def _listed(self, consumer: str) -> Any:
        """The query for the consumer's listed groups (``base.listed``): two equality filters,
        so Firestore merges the automatic single-field indexes, no composite index needed."""
        return (
            self._collection.where(filter=FieldFilter("consumer", "==", consumer))
            .where(filter=FieldFilter(LISTED_FIELD, "==", True))
            .select(["group"])
        )


class FirestoreFifoStore(DocumentLayout):
    """Gate state and parked messages per ``(consumer, group)`` in a Firestore collection."""

    def load(self, consumer: str, group: str) -> GroupState:
        """The group's state; a fresh ``GroupState()`` (version None) if there is none."""
        ref = self._ref(consumer, group)
        snapshot = fail_closed(lambda: ref.get(retry=_RETRY, timeout=TIMEOUT))
        if not snapshot.exists:
            return GroupState()
        return GroupState.from_json(snapshot.get(STATE_FIELD), version=snapshot.update_time)

    def save(
        self, consumer: str, group: str, state: GroupState, expected: GroupState
    ) -> GroupState | None:
        """Write ``state`` if the stored version is still ``expected.version``; the state
        with its new version (the write's ``update_time``), or None if the version was stale."""
        ref = self._ref(consumer, group)
        write_id = uuid.uuid4().hex
        document = {"consumer": consumer, "group": group, **state_fields(state, write_id)}
        option = (
            None
            if expected.version is None
            else self._client.write_option(last_update_time=expected.version)
        )
        attempts = 0

        def attempt() -> object:
            nonlocal attempts
            attempts += 1
            if option is None:
                return ref.create(document, retry=None, timeout=TIMEOUT)
            return ref.update(document, option=option, retry=None, timeout=TIMEOUT)

        try:
            # The retry wraps the whole attempt, so we know whether it ran more than once.
            result: Any = fail_closed(_RETRY(attempt))  # a WriteResult
        except _CONFLICT:
            # After a retry the conflict may be our own first attempt, applied but unanswered.
            update_time = self._written_by(ref, write_id) if attempts > 1 else None
            return None if update_time is None else replace(state, version=update_time)
        return replace(state, version=result.update_time)

    def park(self, consumer: str, group: str, seq: int, message: Message) -> None:
        """Store an early arrival; ``create()`` keeps the first copy of a seq."""
        ref = self._parked_ref(consumer, group, seq)
        document = parked_document(consumer, group, seq, message)
        # AlreadyExists: parked before (a redelivery, or our own retried create); keep that copy.
        with contextlib.suppress(gexc.AlreadyExists):
            fail_closed(lambda: ref.create(document, retry=_RETRY, timeout=TIMEOUT))

    def parked_message(self, consumer: str, group: str, seq: int) -> Message | None:
        """The parked message for ``seq``, or None."""
        ref = self._parked_ref(consumer, group, seq)
        snapshot = fail_closed(lambda: ref.get(retry=_RETRY, timeout=TIMEOUT))
        return decode_message(snapshot.get("message")) if snapshot.exists else None

    def unpark(self, consumer: str, group: str, seq: int) -> None:
        """Delete a parked message (deleting a missing one is fine)."""
        ref = self._parked_ref(consumer, group, seq)
        fail_closed(lambda: ref.delete(retry=_RETRY, timeout=TIMEOUT))

    def groups(self, consumer: str) -> list[str]:
        """The consumer's listed groups (``base.listed``), sorted: one query whose reads are
        the groups it returns (at least one)."""
        return sorted(str(s.get("group")) for s in read_all(self._listed(consumer)))

    def commit_with(
        self,
        consumer: str,
        group: str,
        *,
        token: int,
        change: Callable[[GroupState], GroupState],
        writes: Callable[[firestore.Transaction], object],
    ) -> GroupState:
        """The transactional mode: if lease ``token`` still holds, apply the handler's
        ``writes`` and write ``change(state)`` (the advance) in ONE transaction.

        The handler's writes and the advance commit together or not at all: a crash or an
        exception anywhere before the commit leaves neither, and a redelivery runs the handler
        again from scratch. Returns the state written. Raises StaleClaimError if the lease was
        taken over, StoreUnavailableError if the state kept changing under us or the store
        failed.

        The state is read *outside* the transaction and the advance carries a
        ``last_update_time`` precondition instead. A read inside the transaction would, in
        production, lock the group's document for as long as the handler runs, so every other
        writer of the group - a consumer parking an early arrival, the sweeper, an operator -
        would wait for it. With the precondition nobody waits; if someone else wrote the state
        meanwhile, the commit fails whole (the handler's writes too), and the state is read
        again: a new lease token means we lost the group (StaleClaimError), anything else
        (a park) means run again on the new state - so ``writes`` may run more than once, but
        only one run ever commits.
        """
        ref = self._ref(consumer, group)
        for _ in range(_COMMIT_ATTEMPTS):
            snapshot = fail_closed(lambda: ref.get(retry=_RETRY, timeout=TIMEOUT))
            state = self._leased_state(snapshot, consumer, group, token)
            committed = self._commit_once(
                ref, snapshot, state, change, writes, consumer=consumer, group=group, token=token
            )
            if committed is not None:
                return committed
        raise StoreUnavailableError(
            f"{consumer}/{group}: the state changed under {_COMMIT_ATTEMPTS} transactional "
            "commits in a row; deliver again later"
        )

    def _commit_once(
        self,
        ref: Any,
        snapshot: Any,
        state: GroupState,
        change: Callable[[GroupState], GroupState],
        writes: Callable[[firestore.Transaction], object],
        *,
        consumer: str,
        group: str,
        token: int,
    ) -> GroupState | None:
        """One transaction of :meth:`commit_with` on ``state`` as read in ``snapshot``: the
        state written, or None if someone else wrote the state first (run again)."""
        write_id = uuid.uuid4().hex
        unchanged = self._client.write_option(last_update_time=snapshot.update_time)
        written: list[GroupState] = []

        def body(transaction: firestore.Transaction) -> GroupState:
            writes(transaction)
            new = change(state)
            transaction.update(ref, state_fields(new, write_id), option=unchanged)
            # Its new version is the commit's, which the transaction does not hand back: the
            # gate's next change reads the record (version None = unknown).
            written.append(replace(new, version=None))
            return written[-1]

        try:
            return run_in_transaction(self._client, body)
        except CommitUncertainError as failed:
            # The exception type says little (a failed rollback replaces it): the document does.
            current = fail_closed(lambda: ref.get(retry=_RETRY, timeout=TIMEOUT))
            if current.exists and current.get(WRITE_ID_FIELD) == write_id:
                return written[-1]  # our commit applied; its reply was lost
            self._leased_state(current, consumer, group, token)  # StaleClaimError if lost
            if current.update_time != snapshot.update_time:
                return None  # someone else saved the state (a park, say) while the handler ran
            cause = failed.__cause__
            if cause is None or isinstance(cause, UNAVAILABLE):
                raise
        # Nobody else wrote the state, so the commit failed on something else - one of the
        # handler's writes, say: raise what the client raised, for the gate to count.
        raise cause

    def _leased_state(self, snapshot: Any, consumer: str, group: str, token: int) -> GroupState:
        """The state in ``snapshot``, or StaleClaimError if lease ``token`` no longer holds."""
        if not snapshot.exists:
            raise StaleClaimError(f"{consumer}/{group}: no state, so no lease {token}")
        state = GroupState.from_json(snapshot.get(STATE_FIELD), version=snapshot.update_time)
        if state.lease_token != token:
            raise StaleClaimError(
                f"{consumer}/{group}: lease {token} was taken over (now {state.lease_token})"
            )
        return state

    def _written_by(self, ref: Any, write_id: str) -> object | None:
        """The document's version if its last write was ``write_id``, else None."""
        snapshot = fail_closed(
            lambda: ref.get(field_paths=[WRITE_ID_FIELD], retry=_RETRY, timeout=TIMEOUT)
        )
        if snapshot.exists and snapshot.get(WRITE_ID_FIELD) == write_id:
            update_time: object = snapshot.update_time
            return update_time
        return None
