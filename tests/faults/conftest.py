"""Fixtures for the fault-injection suite: servers of the test's own that it may stop and start.

The session's emulators and Redis are shared by every other test, so a test that restarts a
server gets its own instance on its own free loopback port (same port across the restart), in its
own process group, stopped when the test ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pubsub_toolkit_local import emulators
from pubsub_toolkit_local.processes import free_port
from tests.support.restartable import Restartable


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[Restartable]:
    """A redis-server of this test's own (no persistence: a restart loses every key)."""
    server = Restartable(lambda port, _work: emulators.redis_server(port), free_port(), tmp_path)
    try:
        yield server.start()
    finally:
        server.close()


@pytest.fixture
def own_pubsub(tmp_path: Path) -> Iterator[Restartable]:
    """A Pub/Sub emulator of this test's own (a restart loses topics and restarts ids at 1)."""
    server = Restartable(emulators.pubsub_emulator, free_port(), tmp_path)
    try:
        yield server.start()
    finally:
        server.close()


@pytest.fixture
def own_firestore(tmp_path: Path) -> Iterator[Restartable]:
    """A Firestore emulator of this test's own (a restart loses every document)."""
    server = Restartable(emulators.firestore_emulator, free_port(), tmp_path)
    try:
        yield server.start()
    finally:
        server.close()
