"""Group commit for Firestore: concurrent single-document writes share one atomic commit.

A batch is atomic, so one failed precondition (a duplicate's ``create``, a fenced ``complete``)
fails it whole. On any failure that is not a transport error, the batch's writes are committed
one by one, so every caller gets exactly the outcome its own write would have had alone. A batch
never holds two writes to one document (see :mod:`pubsub_toolkit.stores._coalesce`). A write
made while no other is pending is committed at once, without the coalescer's bookkeeping.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as gexc

from pubsub_toolkit.stores._coalesce import Coalescer, Operation
from pubsub_toolkit.stores._firestore_calls import UNAVAILABLE, bounded_retry

if TYPE_CHECKING:
    from google.cloud import firestore

# Errors of the connection rather than of any write: retrying write by write cannot help.
_TRANSPORT_ERRORS = UNAVAILABLE


class GroupCommitter:
    """``write(lambda batch: batch.create(...))`` returns that write's WriteResult."""

    def __init__(self, client: firestore.Client, *, timeout: float = 10.0) -> None:
        self._client = client
        self._timeout = timeout
        self._retry = bounded_retry(timeout)
        self._coalescer = Coalescer(self._flush)

    def write(self, document_path: str, apply: Callable[[firestore.WriteBatch], object]) -> Any:
        """Add one write to ``document_path``, wait until committed; raise what committing it
        alone would raise."""
        return self._coalescer.run(apply, key=document_path, alone=lambda: self._commit(apply))

    def _flush(self, operations: Sequence[Operation]) -> None:
        if len(operations) == 1:
            self._commit_alone(operations[0])
            return
        batch = self._client.batch()
        for operation in operations:
            operation.apply(batch)
        try:
            results = batch.commit(retry=self._retry, timeout=self._timeout)
        except _TRANSPORT_ERRORS:
            raise
        except gexc.GoogleAPICallError:
            for operation in operations:  # find out whose write failed: each alone
                self._commit_alone(operation)
            return
        for operation, result in zip(operations, results, strict=True):
            operation.finish(result=result)

    def _commit(self, apply: Callable[[firestore.WriteBatch], object]) -> Any:
        """One write committed on its own, when nobody else is writing (no Operation)."""
        batch = self._client.batch()
        apply(batch)
        [result] = batch.commit(retry=self._retry, timeout=self._timeout)
        return result

    def _commit_alone(self, operation: Operation) -> None:
        batch = self._client.batch()
        operation.apply(batch)
        try:
            [result] = batch.commit(retry=self._retry, timeout=self._timeout)
        except Exception as exc:
            operation.finish(error=exc)
        else:
            operation.finish(result=result)
