"""Every FIFO gate scenario of test_fifo_gate, run against AsyncFifoGate (async handler,
async memory store, awaited on an event loop): the async gate must decide exactly as the
sync one."""

from __future__ import annotations

import pytest

from tests.support.async_gate import AsyncGateAsSync
from tests.unit import test_fifo_gate
from tests.unit.test_fifo_gate import *  # noqa: F403 - the scenarios and their fixtures


@pytest.fixture(autouse=True)
def _async_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(test_fifo_gate, "FifoGate", AsyncGateAsSync)
