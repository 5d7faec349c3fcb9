"""Table test of the contract's FIFO pair (:func:`pubsub_toolkit.envelope.check_fifo_pair`):
a ``fifo_group`` and a ``fifo_seq`` come together, or the message is refused (defect 27.5: a
group without a number ran unordered)."""

from __future__ import annotations

import pytest

from pubsub_toolkit.attributes import REASON_GROUP_WITHOUT_SEQ, REASON_SEQ_WITHOUT_GROUP
from pubsub_toolkit.envelope import check_fifo_pair
from pubsub_toolkit.errors import ContractViolation


@pytest.mark.parametrize(
    ("group", "numbered", "reason"),
    [
        ("g", True, None),
        (None, False, None),
        (None, True, REASON_SEQ_WITHOUT_GROUP),
        ("g", False, REASON_GROUP_WITHOUT_SEQ),  # 27.5: never run unordered
    ],
    ids=["both", "neither", "number-alone", "group-alone"],
)
def test_a_fifo_group_and_number_come_together(
    group: str | None, numbered: bool, reason: str | None
) -> None:
    if reason is None:
        check_fifo_pair(group, numbered=numbered)
        return
    with pytest.raises(ContractViolation) as raised:
        check_fifo_pair(group, numbered=numbered)
    assert raised.value.reason == reason
