"""Firestore sequence counters: an atomic ``Increment`` write, no hot-document transaction.

One document per group in one collection (default ``pubsub_toolkit_fifo_counters``), with id
``sha256(group)`` so any group name is a valid id. Its field ``last`` is the highest number
handed out; the next block starts at ``last + 1``.

:class:`FirestoreSequenceCounter` reserves ``count`` numbers with a single write,
``set({"last": Increment(count)}, merge=True)``: it creates the document if missing, the server
applies the increment atomically, and the commit's ``WriteResult.transform_results[0]`` is the
new value - so the block is ``new - count + 1 .. new`` with no read and no transaction. A
transaction on one document is serialised (the emulator manages about 1 a second under
contention, a production document about 1 write a second), whereas increments from many
publishers simply queue. Concurrent reservations from one counter object also share one commit:
per group they become one ``Increment(sum)`` whose range is split among the callers in order
(so even in production one hot group costs one document write per commit, not per message).

Firestore sustains about one write a second on a single document in production, so per-group
throughput is bounded by commits a second times the block size: reserve blocks
(:meth:`~pubsub_toolkit.producer.publisher.Publisher.publish_batch`) for busy groups, or use the
Redis counter.

A client retry of a commit whose first attempt was applied, or a publish that fails after its
reservation, leaves a gap - never a duplicate. Gaps are detectable; see
:mod:`pubsub_toolkit.stores.counters.base`.

:class:`FirestoreTransactionCounter` is **the baseline only** (the seeds' read-then-write design,
kept for ``bench/fifo_sequencer.py``): it reads ``last`` in a transaction and writes
``last + count``. Do not use it in production.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from google.api_core import retry as retries
from google.cloud import firestore

from pubsub_toolkit.errors import ToolkitError
from pubsub_toolkit.stores._coalesce import Coalescer, Operation
from pubsub_toolkit.stores._firestore_calls import TIMEOUT, bounded_retry, fail_closed
from pubsub_toolkit.stores.counters.base import SequenceBlock, check_group, check_reservation

if TYPE_CHECKING:
    from google.cloud.firestore_v1.types import WriteResult


DEFAULT_COLLECTION = "pubsub_toolkit_fifo_counters"
LAST_FIELD = "last"
GROUP_FIELD = "group"  # the plain group name, for operators (the id is a hash)
# A retried commit whose first attempt was applied leaves a gap, never a duplicate.


def document_id(group: str) -> str:
    """A valid, fixed-length document id for any group name."""
    return hashlib.sha256(group.encode()).hexdigest()


class FirestoreSequenceCounter:
    """Per-group counters taken with atomic ``Increment`` writes."""

    def __init__(
        self,
        client: firestore.Client,
        *,
        collection: str = DEFAULT_COLLECTION,
        timeout: float = TIMEOUT,
    ) -> None:
        self._client = client
        self._collection = client.collection(collection)
        self._timeout = timeout
        self._retry = bounded_retry(timeout)
        self._coalescer = Coalescer(self._flush)

    def reserve(self, group: str, count: int = 1) -> SequenceBlock:
        check_reservation(group, count)
        block: SequenceBlock = fail_closed(
            lambda: self._coalescer.run(lambda requests: requests.append((group, count)))
        )
        return block

    def current(self, group: str) -> int:
        check_group(group)
        ref = self._collection.document(document_id(group))
        return _read_last(ref, retry=self._retry, timeout=self._timeout)

    def _flush(self, operations: Sequence[Operation]) -> None:
        """Commit one ``Increment`` per group for all waiting callers, then split the ranges."""
        requests: list[tuple[str, int]] = []
        for operation in operations:
            operation.apply(requests)  # each appends its (group, count)
        totals: dict[str, int] = {}
        for group, count in requests:
            totals[group] = totals.get(group, 0) + count
        batch = self._client.batch()
        for group, total in totals.items():
            document = {GROUP_FIELD: group, LAST_FIELD: firestore.Increment(total)}
            batch.set(self._collection.document(document_id(group)), document, merge=True)
        results = batch.commit(retry=self._retry, timeout=self._timeout)
        next_first = {
            group: _incremented_value(result) - totals[group] + 1
            for group, result in zip(totals, results, strict=True)
        }
        # Hand each caller its slice of its group's range, in arrival order.
        for operation, (group, count) in zip(operations, requests, strict=True):
            first = next_first[group]
            next_first[group] = first + count
            operation.finish(result=SequenceBlock(group, first, first + count - 1))


class FirestoreTransactionCounter:
    """BENCHMARK BASELINE ONLY: read ``last`` in a transaction, write ``last + count``.

    Correct (a transaction never loses an update) but serialised on the group's document: on
    the emulator colliding transactions take about 2 s each. Same document layout as
    :class:`FirestoreSequenceCounter`.
    """

    def __init__(
        self,
        client: firestore.Client,
        *,
        collection: str = DEFAULT_COLLECTION,
        max_attempts: int = 50,
        timeout: float = TIMEOUT,
    ) -> None:
        self._client = client
        self._collection = client.collection(collection)
        # Contended transactions abort and retry; the client's default of 5 attempts gives up
        # under the contention this baseline exists to measure.
        self._max_attempts = max_attempts
        self._timeout = timeout

    def reserve(self, group: str, count: int = 1) -> SequenceBlock:
        check_reservation(group, count)
        ref = self._collection.document(document_id(group))
        timeout = self._timeout

        @firestore.transactional
        def take(transaction: firestore.Transaction) -> int:
            snapshot = ref.get(transaction=transaction, timeout=timeout)
            last = int((snapshot.to_dict() or {}).get(LAST_FIELD, 0)) + count
            transaction.set(ref, {GROUP_FIELD: group, LAST_FIELD: last})
            return last

        last = fail_closed(lambda: take(self._client.transaction(max_attempts=self._max_attempts)))
        return SequenceBlock.ending_at(group, last, count)

    def current(self, group: str) -> int:
        check_group(group)
        ref = self._collection.document(document_id(group))
        return _read_last(ref, retry=bounded_retry(self._timeout), timeout=self._timeout)


def _incremented_value(result: WriteResult) -> int:
    """The new value of the one ``Increment`` transform in ``result``."""
    transforms = result.transform_results
    if len(transforms) != 1 or "integer_value" not in transforms[0]:
        # Never guess: a number derived from anything else could repeat one already used.
        raise ToolkitError(f"Firestore returned no integer increment result: {transforms!r}")
    return int(transforms[0].integer_value)


def _read_last(ref: Any, *, retry: retries.Retry, timeout: float) -> int:
    snapshot = fail_closed(lambda: ref.get(retry=retry, timeout=timeout))
    return int((snapshot.to_dict() or {}).get(LAST_FIELD, 0)) if snapshot.exists else 0
