"""TransactionalInbox when a commit fails and the client's own rollback fails too (defect 7a).

google-cloud-firestore's ``@transactional`` rolls back after *any* failure, and a rollback that
fails raises its own error in place of the original one (see ``_Transactional.__call__``): a
duplicate's AlreadyExists arrives as ServiceUnavailable, or, in production after a commit the
server already closed, as InvalidArgument. And after a commit that applied but whose reply was
lost, the rollback of a transaction no longer in progress raises a ValueError. The inbox must
decide from the marker document, not from the exception type.

Against the Firestore emulator, with the real client; only the real Transaction's ``_rollback``
(the method ``@transactional`` calls) and, for a lost reply, ``_commit`` are patched.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.transaction import Transaction

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.dedup.idempotent import Outcome
from pubsub_toolkit.dedup.inbox import TransactionalInbox
from pubsub_toolkit.errors import ClaimInProgressError, StoreUnavailableError
from pubsub_toolkit.stores.dedup.base import RecordState
from pubsub_toolkit.stores.dedup.firestore import FirestoreDedupStore

TTL = timedelta(hours=1)
ROLLBACK_ERRORS = [
    gexc.ServiceUnavailable("rollback: connection reset"),
    gexc.InvalidArgument("rollback: transaction is invalid or closed"),
]


@pytest.fixture
def client(firestore_emulator: str, project_id: str) -> firestore.Client:
    return firestore.Client(project=project_id)


def fail_rollbacks(monkeypatch: pytest.MonkeyPatch, error: Exception) -> list[str]:
    """Every rollback reaches the server and then raises ``error``; returns a call log."""
    real_rollback = Transaction._rollback
    calls: list[str] = []

    def failing_rollback(self: Transaction) -> None:
        calls.append("rollback")
        with contextlib.suppress(ValueError):  # "not in progress": fail with ``error`` anyway
            real_rollback(self)
        raise error

    monkeypatch.setattr(Transaction, "_rollback", failing_rollback)
    return calls


def effect_writer(client: firestore.Client, runs: list[int]) -> Callable[[Any], str]:
    """A handler that writes one effect document per run and returns ``"result"``."""

    def handler(transaction: Any) -> str:
        runs.append(len(runs) + 1)
        transaction.set(client.collection("effects").document(f"run-{len(runs)}"), {"n": 1})
        return "result"

    return handler


def effect_ids(client: firestore.Client) -> list[str]:
    return sorted(d.id for d in client.collection("effects").stream())


@pytest.mark.parametrize("error", ROLLBACK_ERRORS, ids=lambda e: type(e).__name__)
def test_duplicate_is_recognised_when_the_rollback_fails(
    client: firestore.Client, monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    inbox = TransactionalInbox(client, namespace="c", ttl=TTL)
    runs: list[int] = []
    assert inbox.process("k", "fp", effect_writer(client, runs)).outcome is Outcome.PROCESSED
    calls = fail_rollbacks(monkeypatch, error)
    again = inbox.process("k", "fp", effect_writer(client, runs))
    assert calls == ["rollback"]  # the duplicate's commit failed, and so did its rollback
    assert (again.outcome, again.result) == (Outcome.DUPLICATE, "result")
    assert effect_ids(client) == ["run-1"]  # the duplicate's write never committed


def test_mismatch_is_recognised_when_the_rollback_fails(
    client: firestore.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    inbox = TransactionalInbox(client, namespace="c", ttl=TTL)
    inbox.process("k", "fp-a", effect_writer(client, []))
    fail_rollbacks(monkeypatch, ROLLBACK_ERRORS[0])
    assert inbox.process("k", "fp-b", effect_writer(client, [])).outcome is Outcome.MISMATCH


def test_live_two_phase_claim_is_in_progress_when_the_rollback_fails(
    client: firestore.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The non-transactional mode's pending claim on the same key (same collection).
    FirestoreDedupStore(client).claim("c", "k", "fp", lease=timedelta(minutes=5), ttl=TTL)
    fail_rollbacks(monkeypatch, ROLLBACK_ERRORS[0])
    with pytest.raises(ClaimInProgressError):
        TransactionalInbox(client, namespace="c", ttl=TTL).process(
            "k", "fp", effect_writer(client, [])
        )


def test_failed_commit_without_a_marker_is_transient(
    client: firestore.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The commit fails on the handler's own write (AlreadyExists, like a duplicate's!), so no
    # marker exists: nothing says "duplicate", the delivery must come again.
    taken = client.collection("effects").document("taken")
    taken.set({"n": 0})
    fail_rollbacks(monkeypatch, ROLLBACK_ERRORS[0])
    inbox = TransactionalInbox(client, namespace="c", ttl=TTL)
    with pytest.raises(StoreUnavailableError, match="no marker"):
        inbox.process("k", "fp", lambda tx: tx.create(taken, {"n": 1}))
    assert inbox.log.metrics.get(Outcome.DUPLICATE) == 0


def test_handler_exception_survives_a_failed_rollback(
    client: firestore.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    fail_rollbacks(monkeypatch, ROLLBACK_ERRORS[0])

    def handler(transaction: Any) -> str:
        transaction.set(client.collection("effects").document("x"), {"n": 1})
        raise KeyError("the handler's own failure")

    with pytest.raises(KeyError, match="the handler's own failure"):
        TransactionalInbox(client, namespace="c", ttl=TTL).process("k", "fp", handler)
    assert effect_ids(client) == []


def test_commit_applied_but_reply_lost_is_processed_once(
    client: firestore.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The commit applies, its reply is lost; the client then rolls back a transaction that
    # is no longer in progress, and that ValueError is what the caller sees.
    real_commit = Transaction._commit

    def commit_then_lose_reply(self: Transaction) -> list[Any]:
        real_commit(self)
        raise gexc.DeadlineExceeded("commit reply lost")

    monkeypatch.setattr(Transaction, "_commit", commit_then_lose_reply)
    inbox = TransactionalInbox(client, namespace="c", ttl=TTL)
    runs: list[int] = []
    outcome = inbox.process("k", "fp", effect_writer(client, runs))
    assert (outcome.outcome, outcome.result) == (Outcome.PROCESSED, "result")
    monkeypatch.undo()
    again = inbox.process("k", "fp", effect_writer(client, runs))
    assert (again.outcome, again.result) == (Outcome.DUPLICATE, "result")
    assert effect_ids(client) == ["run-1"]


def test_abandoned_two_phase_claim_and_expired_marker_are_taken_over(
    client: firestore.Client,
) -> None:
    clock = ManualClock()
    FirestoreDedupStore(client, clock=clock).claim(
        "c", "k", "fp", lease=timedelta(seconds=30), ttl=TTL
    )
    clock.advance(timedelta(seconds=31))  # the two-phase holder's lease ran out
    inbox = TransactionalInbox(client, namespace="c", ttl=TTL, clock=clock)
    runs: list[int] = []
    assert inbox.process("k", "fp", effect_writer(client, runs)).outcome is Outcome.PROCESSED
    record = FirestoreDedupStore(client, clock=clock).get("c", "k")
    assert record is not None
    assert (record.state, record.token, record.result) == (RecordState.DONE, 2, "result")

    clock.advance(TTL + timedelta(seconds=1))  # the marker expired; TTL has not deleted it
    assert inbox.process("k", "fp", effect_writer(client, runs)).outcome is Outcome.PROCESSED
    record = FirestoreDedupStore(client, clock=clock).get("c", "k")
    assert record is not None and record.token == 3
    # Each takeover follows a failed blind create whose run never committed: 4 runs, 2 effects.
    assert effect_ids(client) == ["run-2", "run-4"]
