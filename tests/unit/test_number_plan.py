"""Table test of the Publisher's numbering plan (:func:`pubsub_toolkit.producer.stamping.
number_plan`): which messages of a group take a new number (defect 24.1b: a retry of a key and
content was given a new one, and the gate ran it twice)."""

from __future__ import annotations

import pytest

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.producer.stamping import number_plan

A, B = {attr.DEDUP_KEY: "a"}, {attr.DEDUP_KEY: "b"}
NUMBERED = {("a", attr.content_fingerprint(b"1", A)): (7, 3)}  # "a" with b"1": #3 of epoch 7


@pytest.mark.parametrize(
    ("data", "stamped", "latest", "known", "fresh"),
    [
        ([b"1", b"2"], [{}, {}], 7, (), 2),  # no dedup key: all new, nothing looked up
        ([b"1"], [A], 7, ((7, 3),), 0),  # 24.1b: a retry keeps its number
        ([b"1"], [A], 8, (None,), 1),  # the counter's epoch moved on: a new number
        ([b"2"], [A], 7, (None,), 1),  # the key reused for other content: a new message
        ([b"1", b"1"], [B, B], 7, (None, None), 1),  # a copy queued with its first: one
    ],
    ids=["no-keys", "retry", "new-epoch", "other-content", "copy-in-batch"],
)
def test_which_messages_take_a_new_number(
    data: list[bytes],
    stamped: list[dict[str, str]],
    latest: int,
    known: tuple[tuple[int, int] | None, ...],
    fresh: int,
) -> None:
    plan = number_plan(data, stamped, numbered=NUMBERED.get, latest=lambda: latest)
    assert (plan.known, plan.fresh) == (known, fresh)
