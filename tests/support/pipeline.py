"""The delayed-delivery chain on real processes, for integration tests.

origin --push--> ingress (functions-framework) --> Cloud Tasks emulator (process)
       --> [fault proxy] --> relay (gunicorn) --> final

The session's Pub/Sub and Firestore emulators are reused; everything else is started here, each
in its own process group, and stopped on exit.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from google.cloud import tasks_v2

from pubsub_toolkit.delay.scheduler import tasks_client
from pubsub_toolkit.local.processes import ServiceGroup, free_port
from pubsub_toolkit.local.servers import cloud_function, relay, tasks_emulator
from pubsub_toolkit.local.topology import Topology, create_topology
from tests.conftest import repo_root
from tests.support.flaky_proxy import FlakyProxy

INVOKER = "tasks-invoker@local-project.iam.gserviceaccount.com"
LOCATION = "local"
QUEUE_ID = "delay"


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
    """Start the chain for ``project``; the relay refuses each task's first N attempts."""
    tasks_port, oidc_port, relay_port, ingress_port = (free_port() for _ in range(4))
    queue = f"projects/{project}/locations/{LOCATION}/queues/{QUEUE_ID}"
    with ExitStack() as stack:
        group = stack.enter_context(ServiceGroup(work))
        group.start(tasks_emulator(tasks_port, oidc_port=oidc_port))
        proxy = stack.enter_context(FlakyProxy(relay_port, fail_first_per_task=fail_first_per_task))
        relay_url = f"http://127.0.0.1:{proxy.port}"
        env = {
            "GOOGLE_CLOUD_PROJECT": project,
            "FINAL_TOPIC": "final",
            "DEAD_LETTER_TOPIC": "dead-letter",
            "DEDUP_BACKEND": "firestore",
            "TASKS_QUEUE": queue,
            "TASKS_TARGET": "http",
            "RELAY_URL": relay_url,
            "TASKS_SERVICE_ACCOUNT": INVOKER,
            "CLOUD_TASKS_EMULATOR_HOST": f"127.0.0.1:{tasks_port}",
            "OIDC_CERTS_URL": f"http://127.0.0.1:{oidc_port}/oauth2/v1/certs",
            "PUBSUB_EMULATOR_HOST": os.environ["PUBSUB_EMULATOR_HOST"],
            "FIRESTORE_EMULATOR_HOST": os.environ["FIRESTORE_EMULATOR_HOST"],
        }
        client = tasks_client(env["CLOUD_TASKS_EMULATOR_HOST"])
        client.create_queue(
            parent=f"projects/{project}/locations/{LOCATION}",
            queue=tasks_v2.Queue(
                name=queue,
                retry_config=tasks_v2.RetryConfig(
                    max_attempts=10,
                    min_backoff={"nanos": 100_000_000},
                    max_backoff={"seconds": 1},
                ),
            ),
        )
        group.start(relay(relay_port, app_dir=repo_root() / "appengine/relay", env=env))
        group.start(
            cloud_function(
                "ingress",
                source=repo_root() / "functions/ingress/main.py",
                target="ingress",
                port=ingress_port,
                env=env,
            )
        )
        topology = create_topology(project, ingress_url=f"http://127.0.0.1:{ingress_port}")
        yield DelayChain(topology, queue, env["CLOUD_TASKS_EMULATOR_HOST"], proxy, env)
