"""The idempotent processor's protocol (:mod:`pubsub_toolkit.core.idempotent_run`) driven by
hand: each effect it yields is answered here, no store and no driver involved (issue 26)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar

import pytest

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.core import idempotent_run as run
from pubsub_toolkit.core.idempotent_run import (
    ClaimKey,
    Complete,
    Outcome,
    ProcessResult,
    Release,
    RunEffect,
    Sleep,
)
from pubsub_toolkit.errors import ClaimInProgressError, StaleClaimError, StoreUnavailableError
from pubsub_toolkit.stores.dedup import rules
from pubsub_toolkit.stores.dedup.base import Claim, ClaimStatus, DedupRecord

K = TypeVar("K")
V = TypeVar("V")
NOW = datetime(2030, 1, 1, tzinfo=UTC)
LEASE, TTL = timedelta(seconds=60), timedelta(days=8)


class Remembered(Generic[K, V]):
    """A plain dict as the protocol's memory (the drivers hand in a bounded Witness)."""

    def __init__(self) -> None:
        self.entries: dict[K, V] = {}

    def get(self, key: K) -> V | None:
        return self.entries.get(key)

    def put(self, key: K, value: V) -> None:
        self.entries[key] = value


class Decisions:
    """Records each decision logged, as (outcome, level, fields)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, int, dict[str, Any]]] = []

    def decision(
        self,
        outcome: str,
        message: str,
        *,
        dedup_key: str | None,
        level: int = logging.INFO,
        **fields: Any,
    ) -> None:
        self.lines.append((str(outcome), level, {"dedup_key": dedup_key, **fields}))

    @property
    def outcomes(self) -> list[str]:
        return [outcome for outcome, _, _ in self.lines]


@pytest.fixture
def scope() -> run.Scope:
    memory = run.Memory(done=Remembered(), released=Remembered())
    return run.Scope("orders", LEASE, TTL, ManualClock(NOW), memory, Decisions())


def decisions(scope: run.Scope) -> Decisions:
    assert isinstance(scope.log, Decisions)
    return scope.log


def pending(token: int = 1, fingerprint: str = "fp") -> DedupRecord:
    return rules.pending_record("orders", "k", fingerprint, token, now=NOW, lease=LEASE, ttl=TTL)


def owned(status: ClaimStatus = ClaimStatus.ACQUIRED, token: int = 1) -> Claim:
    return Claim(status, token, pending(token))


def start(scope: run.Scope, key: str = "k") -> tuple[run.Run[ProcessResult], run.Effect]:
    protocol = run.process(scope, key, "fp", {"message_id": "m1"})
    return protocol, next(protocol)


def finish(protocol: run.Run[ProcessResult], reply: object) -> ProcessResult:
    with pytest.raises(StopIteration) as stop:
        protocol.send(reply)
    result: ProcessResult = stop.value.value
    return result


def test_a_first_run_claims_runs_the_effect_and_completes(scope: run.Scope) -> None:
    protocol, effect = start(scope)
    assert effect == ClaimKey("orders", "k", "fp", lease=LEASE, ttl=TTL)
    claim = owned()
    assert protocol.send(claim) == RunEffect()
    assert protocol.send("charged") == Complete("orders", "k", claim, "charged", ttl=TTL)
    assert finish(protocol, None) == ProcessResult(Outcome.PROCESSED, "charged")
    assert decisions(scope).lines == [
        ("processed", logging.INFO, {"dedup_key": "k", "message_id": "m1"})
    ]
    done = scope.memory.done.get(("k", "fp"))
    assert done == run.Done("charged", NOW, recorded=True)


def test_a_duplicate_returns_the_stored_result_without_running(scope: run.Scope) -> None:
    protocol, _ = start(scope)
    stored = rules.done_record(pending(), "first", now=NOW - timedelta(hours=1), ttl=TTL)
    result = finish(protocol, Claim(ClaimStatus.DONE, 1, stored))
    assert result == ProcessResult(Outcome.DUPLICATE, "first")
    assert decisions(scope).outcomes == ["duplicate"]
    # remembered as of the store's completion (its TTL runs from then)
    assert scope.memory.done.get(("k", "fp")) == run.Done(
        "first", NOW - timedelta(hours=1), recorded=True
    )


def test_another_content_under_the_key_is_a_mismatch(scope: run.Scope) -> None:
    protocol, _ = start(scope)
    result = finish(protocol, Claim(ClaimStatus.MISMATCH, 1, pending(fingerprint="other")))
    assert result == ProcessResult(Outcome.MISMATCH)
    [(outcome, level, fields)] = decisions(scope).lines
    assert (outcome, level) == ("mismatch", logging.ERROR)
    assert fields["alert"] == "fingerprint_mismatch"
    assert fields["stored_fingerprint"] == "other"


def test_a_live_claim_elsewhere_is_in_progress_and_frees_the_key_here(scope: run.Scope) -> None:
    protocol, _ = start(scope)
    with pytest.raises(ClaimInProgressError):
        protocol.send(Claim(ClaimStatus.IN_PROGRESS, 1, pending()))
    assert decisions(scope).outcomes == ["in_progress"]
    _, effect = start(scope)  # the key no longer runs here
    assert isinstance(effect, ClaimKey)


def test_a_key_running_in_this_process_is_in_progress_before_any_effect(
    scope: run.Scope,
) -> None:
    running, _ = start(scope)  # suspended at its claim (kept: closing it frees the key)
    with pytest.raises(ClaimInProgressError, match="running here"):
        start(scope)
    assert decisions(scope).outcomes == ["in_progress"]
    running.close()
    start(scope)


def test_a_failing_effect_releases_the_claim_and_raises(scope: run.Scope) -> None:
    protocol, _ = start(scope)
    claim = owned()
    protocol.send(claim)
    assert protocol.throw(RuntimeError("boom")) == Release("orders", "k", claim)
    with pytest.raises(RuntimeError, match="boom"):
        protocol.send(None)
    assert decisions(scope).outcomes == ["effect_failed"]
    assert scope.memory.released.get("k") == 1
    # the redelivery that takes that very claim over is a retry, said at INFO
    protocol, _ = start(scope)
    assert protocol.send(owned(ClaimStatus.TAKEN_OVER, token=2)) == RunEffect()
    assert decisions(scope).lines[-1][:2] == ("taken_over", logging.INFO)


def test_a_release_that_fails_does_not_hide_the_effects_error(scope: run.Scope) -> None:
    protocol, _ = start(scope)
    protocol.send(owned())
    protocol.throw(RuntimeError("boom"))
    with pytest.raises(RuntimeError, match="boom"):
        protocol.throw(StoreUnavailableError("down"))
    assert scope.memory.released.get("k") is None


def test_complete_is_retried_after_a_transient_failure(scope: run.Scope) -> None:
    protocol, _ = start(scope)
    claim = owned()
    protocol.send(claim)
    complete = protocol.send("charged")
    assert isinstance(complete, Complete)
    assert protocol.throw(StoreUnavailableError("blip")) == Sleep(0.1)
    assert protocol.send(None) == complete
    assert protocol.throw(StoreUnavailableError("blip")) == Sleep(0.5)
    assert protocol.send(None) == complete
    assert finish(protocol, None) == ProcessResult(Outcome.PROCESSED, "charged")
    assert decisions(scope).outcomes == ["processed"]


def test_complete_gives_up_after_its_retries_and_remembers_the_effect(scope: run.Scope) -> None:
    protocol, _ = start(scope)
    protocol.send(owned())
    protocol.send("charged")
    for delay in run.COMPLETE_RETRY_DELAYS:
        assert protocol.throw(StoreUnavailableError("down")) == Sleep(delay)
        protocol.send(None)
    with pytest.raises(StoreUnavailableError):
        protocol.throw(StoreUnavailableError("down"))
    assert decisions(scope).outcomes == ["complete_failed"]
    assert scope.memory.done.get(("k", "fp")) == run.Done("charged", NOW, recorded=False)
    # the redelivery records it late and never runs it again
    protocol, _ = start(scope)
    claim = owned(ClaimStatus.TAKEN_OVER, token=2)
    assert protocol.send(claim) == Complete("orders", "k", claim, "charged", ttl=TTL)
    assert finish(protocol, None) == ProcessResult(Outcome.DUPLICATE, "charged")
    assert decisions(scope).outcomes[-1] == "recorded_late"


def test_a_store_that_lost_the_done_record_is_alerted_and_not_rerun(scope: run.Scope) -> None:
    scope.memory.done.put(("k", "fp"), run.Done("charged", NOW, recorded=True))
    protocol, _ = start(scope)
    claim = owned()
    assert protocol.send(claim) == Complete("orders", "k", claim, "charged", ttl=TTL)
    # another holder has it by now: it finds it done, or runs it under its newer lease
    with pytest.raises(StopIteration) as stop:
        protocol.throw(StaleClaimError("taken"))
    assert stop.value.value == ProcessResult(Outcome.DUPLICATE, "charged")
    [(outcome, level, fields)] = decisions(scope).lines
    assert (outcome, level, fields["alert"]) == ("store_rollback", logging.ERROR, "store_rollback")


def test_an_effect_fenced_by_a_newer_holder_is_alerted(scope: run.Scope) -> None:
    protocol, _ = start(scope)
    protocol.send(owned())
    protocol.send("charged")
    with pytest.raises(StaleClaimError):
        protocol.throw(StaleClaimError("taken"))
    assert decisions(scope).lines[-1][:2] == ("fenced", logging.ERROR)


def test_the_drivers_throw_an_effects_error_back_where_it_was_yielded(scope: run.Scope) -> None:
    performed: list[run.Effect] = []

    def perform(effect: run.Effect) -> object:
        performed.append(effect)
        if isinstance(effect, ClaimKey):
            return owned()
        if isinstance(effect, RunEffect):
            raise ValueError("handler")
        return None

    with pytest.raises(ValueError, match="handler"):
        run.run(run.process(scope, "k", "fp"), perform)
    assert [type(effect) for effect in performed] == [ClaimKey, RunEffect, Release]
