"""The delayed-delivery chain on real processes, for integration tests.

origin --push--> ingress (functions-framework) --> Cloud Tasks emulator (process)
       --> fault proxy --> relay (gunicorn) --> final

The session's Pub/Sub and Firestore emulators are shared with :class:`LocalStack`; everything
else is started for the test and stopped on exit.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from google.cloud import tasks_v2

from pubsub_toolkit.delay.scheduler import tasks_client
from pubsub_toolkit_local.processes import free_port
from pubsub_toolkit_local.stack import LocalStack, RunningEmulators, StackOptions
from pubsub_toolkit_local.topology import Topology
from tests.conftest import repo_root
from tests.support.flaky_proxy import FlakyProxy


@dataclass(frozen=True)
class DelayChain:
    topology: Topology
    queue: str
    tasks_host: str
    proxy: FlakyProxy
    env: dict[str, str]

    def client(self) -> tasks_v2.CloudTasksClient:
        return tasks_client(self.tasks_host)


@contextmanager
def delay_chain(project: str, work: Path, *, fail_first_per_task: int = 0) -> Iterator[DelayChain]:
    """Start the chain for ``project``; the relay's proxy refuses each task's first N attempts."""
    relay_port = free_port()
    with FlakyProxy(relay_port, fail_first_per_task=fail_first_per_task) as proxy:
        options = StackOptions(
            project=project,
            relay_port=relay_port,
            relay_public_url=f"http://127.0.0.1:{proxy.port}",
            emulators=RunningEmulators(
                os.environ["PUBSUB_EMULATOR_HOST"], os.environ["FIRESTORE_EMULATOR_HOST"]
            ),
        )
        with LocalStack(options, work, repo_root()) as stack:
            assert stack.topology is not None
            yield DelayChain(
                stack.topology,
                stack.queue,
                stack.env["CLOUD_TASKS_EMULATOR_HOST"],
                proxy,
                stack.env,
            )
