"""Every end-of-group scenario of test_fifo_end_of_group, run against AsyncFifoGate."""

from __future__ import annotations

import pytest

from tests.support.async_gate import AsyncGateAsSync
from tests.unit import test_fifo_end_of_group
from tests.unit.test_fifo_end_of_group import *  # noqa: F403 - the scenarios and their fixtures


@pytest.fixture(autouse=True)
def _async_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(test_fifo_end_of_group, "FifoGate", AsyncGateAsSync)
