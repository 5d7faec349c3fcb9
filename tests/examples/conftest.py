"""The local stack for the delayed-delivery example, and a clean environment for examples.

The stack (ingress under functions-framework, the Cloud Tasks emulator, the relay under
gunicorn) runs for a fresh project on the session's emulators, as ``pubsub-toolkit local up``
would run it; every process it starts is stopped by process group afterwards.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from pubsub_toolkit_local.stack import LocalStack, RunningEmulators, StackOptions
from tests.conftest import repo_root

# What an example reads from the environment: the test sets each one it means to pass, so
# nothing leaks in from the shell that runs the suite.
EXAMPLE_VARIABLES = (
    "GOOGLE_CLOUD_PROJECT",
    "PUBSUB_EMULATOR_HOST",
    "FIRESTORE_EMULATOR_HOST",
    "CLOUD_TASKS_EMULATOR_HOST",
    "PUBSUB_TOOLKIT_REDIS_URL",
    "PUBSUB_TOOLKIT_STORE_BACKEND",
    "PUBSUB_TOOLKIT_STORE_PREFIX",
    "PUBSUB_TOOLKIT_FINAL_TOPIC",
    "PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC",
    "ORIGIN_TOPIC",
    "PUBSUB_TOOLKIT_TASKS_QUEUE",
    "PUBSUB_TOOLKIT_TASKS_TARGET",
    "PUBSUB_TOOLKIT_RELAY_URL",
    "PUBSUB_TOOLKIT_TASKS_SERVICE_ACCOUNT",
    "PUBSUB_TOOLKIT_OIDC_CERTS_URL",
    "PUBSUB_TOOLKIT_CONSUMER_ID",
)


def clean_env(**values: str) -> dict[str, str]:
    """The suite's environment without any example variable, plus ``values``."""
    env = {k: v for k, v in os.environ.items() if k not in EXAMPLE_VARIABLES}
    env.update(values)
    return env


@pytest.fixture(scope="module")
def stack(
    pubsub_emulator: str, firestore_emulator: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalStack]:
    """The local stack's pipeline for a fresh project on the session's emulators."""
    options = StackOptions(
        project=f"examples-{uuid.uuid4().hex[:10]}",
        emulators=RunningEmulators(pubsub_emulator, firestore_emulator),
    )
    with LocalStack(options, tmp_path_factory.mktemp("stack"), repo_root()) as running:
        yield running
