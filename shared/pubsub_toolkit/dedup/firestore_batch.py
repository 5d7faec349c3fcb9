"""Group commit for Firestore: concurrent single-document writes share one atomic commit.

A batch is atomic, so one failed precondition (a duplicate's ``create``, a fenced ``complete``)
fails it whole. The batch's writes are then committed one by one, so every caller gets exactly
the outcome its own write would have had alone. See :mod:`.coalesce` for the sharing itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as gexc

from pubsub_toolkit.dedup.coalesce import Coalescer, Operation

if TYPE_CHECKING:
    from google.cloud import firestore

# Errors that belong to one write of a batch rather than to the batch as a whole.
_PER_WRITE_ERRORS = (gexc.AlreadyExists, gexc.FailedPrecondition, gexc.NotFound)


class GroupCommitter:
    """``write(lambda batch: batch.create(...))`` returns that write's WriteResult."""

    def __init__(self, client: firestore.Client, *, timeout: float = 10.0) -> None:
        self._client = client
        self._timeout = timeout
        self._coalescer = Coalescer(self._flush)

    def write(self, apply: Callable[[firestore.WriteBatch], object]) -> Any:
        """Add one write, wait until committed; raise what committing it alone would raise."""
        return self._coalescer.run(apply)

    def _flush(self, operations: Sequence[Operation]) -> None:
        if len(operations) == 1:
            self._commit_alone(operations[0])
            return
        batch = self._client.batch()
        for operation in operations:
            operation.apply(batch)
        try:
            results = batch.commit(timeout=self._timeout)
        except _PER_WRITE_ERRORS:
            for operation in operations:  # find out whose write failed: each alone
                self._commit_alone(operation)
            return
        for operation, result in zip(operations, results, strict=True):
            operation.finish(result=result)

    def _commit_alone(self, operation: Operation) -> None:
        batch = self._client.batch()
        operation.apply(batch)
        try:
            [result] = batch.commit(timeout=self._timeout)
        except Exception as exc:
            operation.finish(error=exc)
        else:
            operation.finish(result=result)
