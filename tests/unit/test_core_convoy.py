"""Table tests of :mod:`pubsub_toolkit.core.convoy`: the convoy's queues, shared by the thread
convoy (``ConvoyDispatcher``) and the asyncio one (``AsyncConsumer``) (issue 26)."""

from __future__ import annotations

import pytest

from pubsub_toolkit.core.convoy import GroupQueues


def queued(puts: list[tuple[str, int, str]]) -> tuple[GroupQueues[str], list[bool]]:
    """Queues after ``puts`` (group, seq, item); and what each put answered."""
    queues: GroupQueues[str] = GroupQueues()
    return queues, [queues.put(group, seq, item) for group, seq, item in puts]


@pytest.mark.parametrize(
    ("puts", "starts"),
    [
        ([("g", 1, "a")], [True]),
        # the second of a group finds its runner: not started again
        ([("g", 1, "a"), ("g", 2, "b")], [True, False]),
        # another group is a runner of its own
        ([("g", 1, "a"), ("h", 1, "b")], [True, True]),
    ],
    ids=["first", "same-group", "other-group"],
)
def test_a_put_says_when_a_runner_starts(
    puts: list[tuple[str, int, str]], starts: list[bool]
) -> None:
    _, answers = queued(puts)
    assert answers == starts


@pytest.mark.parametrize(
    ("puts", "batch", "takes"),
    [
        # out of order in one pull: taken in number order
        ([(3, "c"), (1, "a"), (2, "b")], 1, [["a"], ["b"], ["c"]]),
        # duplicates of one number keep their arrival order
        ([(2, "b1"), (1, "a"), (2, "b2")], 1, [["a"], ["b1"], ["b2"]]),
        # a batch is the head and the numbers right after it
        ([(1, "a"), (2, "b"), (3, "c"), (5, "e")], 3, [["a", "b", "c"], ["e"]]),
        ([(1, "a"), (2, "b"), (3, "c")], 2, [["a", "b"], ["c"]]),
        # a gap ends the batch; a duplicate is not the next number either
        ([(1, "a"), (3, "c")], 5, [["a"], ["c"]]),
        ([(1, "a"), (1, "a2"), (2, "b")], 5, [["a"], ["a2", "b"]]),
    ],
    ids=["order", "duplicates", "batch", "batch-limit", "gap", "duplicate-head"],
)
def test_a_groups_deliveries_are_taken_in_number_order(
    puts: list[tuple[int, str]], batch: int, takes: list[list[str]]
) -> None:
    queues, _ = queued([("g", seq, item) for seq, item in puts])
    for expected in takes:
        assert [q.item for q in queues.take("g", batch)] == expected
        assert queues.active("g")
    assert queues.take("g", batch) == []
    assert not queues.active("g")


def test_an_empty_take_frees_the_group_in_the_same_step() -> None:
    queues, _ = queued([("g", 1, "a")])
    assert [q.item for q in queues.take("g")] == ["a"]
    assert queues.active("g")  # its runner is running "a"
    assert not queues.put("g", 2, "b")  # the runner takes it in turn
    assert [q.item for q in queues.take("g")] == ["b"]
    assert queues.take("g") == []
    assert not queues.active("g")
    assert queues.put("g", 3, "c")  # idle: a new runner starts


def test_a_drain_hands_back_every_waiting_delivery_and_runners_then_leave() -> None:
    queues, _ = queued([("g", 1, "a"), ("g", 2, "b"), ("h", 1, "c")])
    assert [q.item for q in queues.take("g")] == ["a"]  # running
    assert sorted(q.item for q in queues.drain()) == ["b", "c"]
    assert queues.active("g") and queues.active("h")  # until their runners find them empty
    assert queues.take("g") == [] and queues.take("h") == []
    assert not queues.active("g") and not queues.active("h")


def test_a_runner_that_ended_abnormally_frees_its_group_with_what_waited() -> None:
    queues, _ = queued([("g", 1, "a"), ("g", 2, "b")])
    queues.take("g")
    assert [q.item for q in queues.forget("g")] == ["b"]
    assert not queues.active("g")
    assert queues.forget("g") == []
    assert queues.put("g", 3, "c")
