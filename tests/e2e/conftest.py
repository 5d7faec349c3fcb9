"""The whole local stack for end-to-end tests, driven only through public surfaces."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from pubsub_toolkit_local.stack import LocalStack, RunningEmulators, StackOptions
from tests.conftest import repo_root


@pytest.fixture(scope="module")
def stack(
    pubsub_emulator: str, firestore_emulator: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalStack]:
    """ingress, the Cloud Tasks emulator and the relay for a fresh project on the session's
    emulators; everything it starts is stopped by process group afterwards."""
    options = StackOptions(
        project=f"e2e-{uuid.uuid4().hex[:10]}",
        emulators=RunningEmulators(
            os.environ["PUBSUB_EMULATOR_HOST"], os.environ["FIRESTORE_EMULATOR_HOST"]
        ),
    )
    with LocalStack(options, tmp_path_factory.mktemp("stack"), repo_root()) as running:
        yield running
