"""Group commit for Firestore: concurrent writes share one commit RPC.

Each dedup decision is one small write (a claim ``create`` or a ``complete`` update), and with
the Python client every commit costs about as much CPU in the client as in the server. When
several threads of one instance write at once, :class:`GroupCommitter` sends their writes as one
atomic ``WriteBatch``; when nothing else is waiting, a write goes alone, so an idle instance pays
no extra latency (no timer, no background thread: a waiting caller leads the next batch).

A batch is atomic, so one failed precondition (a duplicate's ``create``, a fenced ``complete``)
fails it whole. The committer then commits that batch's writes one by one, so every caller gets
exactly the outcome its own write would have had alone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as gexc

if TYPE_CHECKING:
    from google.cloud import firestore

BatchWrite = Callable[["firestore.WriteBatch"], object]
# Errors that belong to one write of a batch rather than to the batch as a whole.
_PER_WRITE_ERRORS = (gexc.AlreadyExists, gexc.FailedPrecondition, gexc.NotFound)


class _Item:
    __slots__ = ("apply", "error", "lead", "ready", "result")

    def __init__(self, apply: BatchWrite) -> None:
        self.apply = apply
        self.ready = threading.Event()
        self.lead = False
        self.result: Any = None
        self.error: BaseException | None = None


class GroupCommitter:
    """Coalesces concurrent single-document writes into shared atomic commits."""

    def __init__(self, client: firestore.Client, *, max_batch: int = 100, timeout: float = 10.0):
        self._client = client
        self._max_batch = max_batch
        self._timeout = timeout
        self._lock = threading.Lock()
        self._queue: list[_Item] = []
        self._leader_active = False

    def write(self, apply: BatchWrite) -> Any:
        """Add one write via ``apply(batch)``, wait until committed, return its WriteResult.

        Raises what committing that write alone would raise (AlreadyExists, FailedPrecondition).
        """
        item = _Item(apply)
        with self._lock:
            self._queue.append(item)
            item.lead = not self._leader_active
            self._leader_active = True
        if not item.lead:
            item.ready.wait()
        if item.lead:  # set initially, or handed over by the previous leader
            self._lead_one_batch()
            item.ready.wait()
        if item.error is not None:
            raise item.error
        return item.result

    def _lead_one_batch(self) -> None:
        with self._lock:
            batch = self._queue[: self._max_batch]
            del self._queue[: self._max_batch]
        self._commit(batch)
        with self._lock:
            if self._queue:
                # Hand leadership to the oldest waiter rather than keep leading: under steady
                # load the leader's own caller would otherwise never get its answer back.
                successor = self._queue[0]
                successor.lead = True
                successor.ready.set()
            else:
                self._leader_active = False

    def _commit(self, items: list[_Item]) -> None:
        if len(items) == 1:
            self._commit_alone(items[0])
            return
        batch = self._client.batch()
        for item in items:
            item.apply(batch)
        try:
            results = batch.commit(timeout=self._timeout)
        except _PER_WRITE_ERRORS:
            for item in items:  # find out whose write failed: each alone
                self._commit_alone(item)
            return
        except BaseException as exc:
            for item in items:
                self._finish(item, error=exc)
            return
        for item, result in zip(items, results, strict=True):
            self._finish(item, result=result)

    def _commit_alone(self, item: _Item) -> None:
        batch = self._client.batch()
        item.apply(batch)
        try:
            [result] = batch.commit(timeout=self._timeout)
        except BaseException as exc:
            self._finish(item, error=exc)
        else:
            self._finish(item, result=result)

    @staticmethod
    def _finish(item: _Item, *, result: Any = None, error: BaseException | None = None) -> None:
        item.result, item.error = result, error
        item.lead = False
        item.ready.set()
