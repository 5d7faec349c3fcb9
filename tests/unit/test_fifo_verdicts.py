"""Table tests of the FIFO gate's verdicts (:mod:`pubsub_toolkit.core.fifo_verdicts`): each the
decision a past defect lived in, with the row that tells the fix from its revert (the
simulation's mutation of the same name, ``tests/simulation/mutations.py``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.core import fifo_verdicts as verdicts
from pubsub_toolkit.core.fifo_policy import PoisonPolicy, message_key
from pubsub_toolkit.core.fifo_verdicts import (
    BatchFailure,
    OlderVerdict,
    PoisonVerdict,
    RestartVerdict,
)
from pubsub_toolkit.errors import (
    RetryLater,
    StaleClaimError,
    StoreUnavailableError,
    TransientError,
)
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.fifo_state.base import GroupState, key_digest

NOW = datetime(2026, 1, 1, tzinfo=UTC)
LIVE = NOW + timedelta(seconds=30)


def keyed(key: str, **attributes: str) -> Message:
    return Message(b"x", attributes={attr.DEDUP_KEY: key, **attributes})


def digest(key: str) -> str:
    return key_digest(message_key(keyed(key)))


@pytest.mark.parametrize(
    ("token", "held"),
    [(3, True), (2, False), (4, False)],
    ids=["own-token", "taken-over", "unknown-newer"],
)
def test_holds_lease_only_under_the_records_own_token(token: int, held: bool) -> None:
    # H1: a write under a token the record no longer carries must not land.
    assert verdicts.holds_lease(GroupState(lease_token=3), token) is held


def test_ran_before_reads_the_states_keys_first_and_the_memory_only_beyond_them() -> None:
    asked: list[int] = []

    def remembered(group: str, state: GroupState, seq: int, message: Message) -> int | None:
        asked.append(seq)
        return 7

    state = GroupState(last_processed=10, keys=((4, digest("k")),))
    assert verdicts.ran_before("g", state, 11, keyed("k"), remembered) == 4
    assert asked == []  # the state knew: no lookup
    # 24.L2: further back than the state's keys, this process's memory says where it ran.
    assert verdicts.ran_before("g", GroupState(last_processed=10), 11, keyed("k"), remembered) == 7
    assert (
        verdicts.ran_before("g", GroupState(last_processed=10), 11, keyed("k"), lambda *_: None)
        is None
    )


@pytest.mark.parametrize(
    ("exc", "named"),
    [
        (StaleClaimError("taken over"), ((1, "a"), (2, "b"))),  # 24.outlived: fenced
        (StoreUnavailableError("down"), ()),  # the lease may still be ours
    ],
    ids=["fenced", "store-failure"],
)
def test_outlived_names_every_step_of_a_fenced_run_only(
    exc: Exception, named: tuple[tuple[int, str], ...]
) -> None:
    assert verdicts.outlived([(1, "a"), (2, "b")], exc) == named


@pytest.mark.parametrize(
    ("exc", "verdict"),
    [
        (RetryLater(timedelta(seconds=5)), BatchFailure.WAIT),  # 24.s: the handler's decision
        (ValueError("boom"), BatchFailure.ONE_BY_ONE),
        (TransientError("flaky"), BatchFailure.ONE_BY_ONE),
    ],
    ids=["retry-later", "failure", "transient"],
)
def test_batch_failure_waits_only_when_the_handler_asked_to(
    exc: Exception, verdict: BatchFailure
) -> None:
    assert verdicts.batch_failure(exc) is verdict


@pytest.mark.parametrize(
    ("poison", "dead_letters", "verdict"),
    [
        (PoisonPolicy.SKIP, True, PoisonVerdict.SKIP),
        (PoisonPolicy.SKIP, False, PoisonVerdict.BLOCK),  # defect 4: never skipped unkept
        (PoisonPolicy.BLOCK, True, PoisonVerdict.BLOCK),
        (PoisonPolicy.BLOCK, False, PoisonVerdict.BLOCK),
    ],
)
def test_poison_is_skipped_only_where_a_dead_letter_topic_keeps_it(
    poison: PoisonPolicy, dead_letters: bool, verdict: PoisonVerdict
) -> None:
    assert verdicts.poison_verdict(poison, dead_letters=dead_letters) is verdict


@pytest.mark.parametrize(
    ("state", "held_idle", "running_here", "verdict"),
    [
        (GroupState(lease_until=LIVE), False, False, RestartVerdict.RUNNING),
        (GroupState(lease_until=LIVE), True, False, RestartVerdict.RESTART),  # held idle
        (GroupState(), False, True, RestartVerdict.RUNNING),  # past its lease, here
        # 24.L1: the old head waits parked - it runs first
        (GroupState(parked=(1, 3)), False, False, RestartVerdict.HEAD_PARKED),
        (GroupState(parked=(1,), blocked_at=1), False, False, RestartVerdict.SETTLE),
        (GroupState(parked=(3,)), False, False, RestartVerdict.SETTLE),  # behind a gap
        (GroupState(last_processed=5), False, False, RestartVerdict.RESTART),
    ],
    ids=[
        "leased",
        "held-idle",
        "running-here",
        "head-parked",
        "head-blocked",
        "behind-a-gap",
        "nothing-left",
    ],
)
def test_restart_verdict(
    state: GroupState, held_idle: bool, running_here: bool, verdict: RestartVerdict
) -> None:
    got = verdicts.restart_verdict(state, now=NOW, held_idle=held_idle, running_here=running_here)
    assert got is verdict


# The record after epoch 1 ended at 5 and epoch 2 began: 1's last keys kept at numbers up to 0
# (#5 of epoch 1 at 0, #4 at -1).
RESTARTED = GroupState(epoch=2, prior=((1, 5),), keys=((-1, digest("four")), (0, digest("five"))))


@pytest.mark.parametrize(
    ("seq", "message", "verdict"),
    [
        (5, keyed("five"), OlderVerdict.DUPLICATE),  # a late copy of what ran there
        (5, keyed("other"), OlderVerdict.REUSED),  # 24.older: another key ran at #5
        (3, keyed("three"), OlderVerdict.DUPLICATE),  # passed, its key beyond those kept
        (6, keyed("six"), OlderVerdict.ENDED),  # the old sequence ended before #6
        (6, Message(b"", attributes={attr.FIFO_FILLER: "x"}), OlderVerdict.DUPLICATE),
    ],
    ids=["same-key", "other-key", "passed-unknown", "never-ran", "filler"],
)
def test_older_verdict(seq: int, message: Message, verdict: OlderVerdict) -> None:
    assert verdicts.older_verdict(RESTARTED, 1, seq, message) is verdict
