"""Every ``error_reason`` the toolkit writes is in the reference's table of dead-letter reasons.

A producer in another language learns the contract from docs/reference/attributes.md, and
operators filter dead letters on ``error_reason``: a reason missing from that table (as
``fifo_sequence_restarted``, ``fifo_state_expired``, ``retry_limit`` and the relay's two
were) is a dead letter nobody can look up; a row written below the table's end (as
``fifo_after_end`` was) is not in the table at all.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pubsub_toolkit

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "attributes.md"
# REASON_* constants that are not an ``error_reason`` on a dead letter: the relay's unconfirmed
# hand-over is logged whole for the operator (an ALERT), never dead-lettered.
NOT_DEAD_LETTERS = frozenset({"relay_handover_unconfirmed"})


def _reasons_in_code() -> set[str]:
    found: set[str] = set()
    for info in pkgutil.walk_packages(pubsub_toolkit.__path__, "pubsub_toolkit."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if name.startswith("REASON_") and isinstance(value, str):
                found.add(value)
    return found - NOT_DEAD_LETTERS


def _reasons_in_table() -> set[str]:
    """The first column of the table under "## Dead-letter reasons", up to its first non-row."""
    lines = PAGE.read_text().split("## Dead-letter reasons", 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| `error_reason`"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return {m.group(1) for row in rows if (m := re.match(r"\| `([a-z_]+)` \|", row))}


def test_every_reason_the_code_writes_is_a_row_of_the_reference_table() -> None:
    code = _reasons_in_code()
    assert "fifo_after_end" in code and "invalid_fifo_seq" in code  # the scan finds them
    assert sorted(code - _reasons_in_table()) == []


def test_the_table_names_no_reason_the_code_never_writes() -> None:
    written = _reasons_in_code() | {"schedule_rejected"}  # a literal in delay/scheduler.py
    assert sorted(_reasons_in_table() - written) == []
