"""The whole pipeline on one machine, wired the way Google Cloud wires it.

    origin --push--> ingress (functions-framework) --> Cloud Tasks emulator --> relay (gunicorn)
       \\-------------------------------------------------------------------------> final

The official Pub/Sub and Firestore emulators and Redis are started too, unless the caller
passes hosts of running ones (the test session shares its emulators). Every process runs in its
own process group and :meth:`LocalStack.stop` stops them all.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pubsub_toolkit_local import emulators
from pubsub_toolkit_local.processes import ServiceGroup, free_port
from pubsub_toolkit_local.servers import cloud_function, relay, tasks_emulator
from pubsub_toolkit_local.topology import Topology, create_topology

INVOKER = "tasks-invoker@local-project.iam.gserviceaccount.com"
LOCATION = "local"
QUEUE_ID = "pubsub-toolkit-delay"


@dataclass(frozen=True)
class RunningEmulators:
    """Hosts of emulators someone else runs (``host:port``), to share instead of starting."""

    pubsub: str
    firestore: str
    redis_url: str | None = None


@dataclass(frozen=True)
class StackOptions:
    """What to run. Ports of 0 are picked free at start."""

    project: str = "local-project"
    store_backend: str = "firestore"
    pubsub_port: int = 0
    firestore_port: int = 0
    redis_port: int = 0
    tasks_port: int = 0
    oidc_port: int = 0
    ingress_port: int = 0
    relay_port: int = 0
    emulators: RunningEmulators | None = None
    # Where Cloud Tasks should send releases, when something (a fault proxy) fronts the relay.
    relay_public_url: str | None = None
    extra_env: dict[str, str] = field(default_factory=dict)


def _port(value: int) -> int:
    return value or free_port()


class LocalStack:
    """Starts, describes and stops the local pipeline."""

    def __init__(self, options: StackOptions, work_dir: Path, repo: Path) -> None:
        self.options = options
        self.work_dir = work_dir
        self.repo = repo
        self.group = ServiceGroup(work_dir)
        self.env: dict[str, str] = {}
        self.topology: Topology | None = None
        self.queue = f"projects/{options.project}/locations/{LOCATION}/queues/{QUEUE_ID}"

    def start(self) -> LocalStack:
        """Start every part, create the topology and the queue; stop all if any part fails."""
        try:
            self._start()
        except BaseException:
            self.group.stop_all()
            raise
        return self

    def _start(self) -> None:
        o = self.options
        pubsub, firestore, redis_url = self._emulators()
        tasks_port, oidc_port = _port(o.tasks_port), _port(o.oidc_port)
        relay_port, ingress_port = _port(o.relay_port), _port(o.ingress_port)
        relay_url = o.relay_public_url or f"http://127.0.0.1:{relay_port}"
        self.env = {
            "GOOGLE_CLOUD_PROJECT": o.project,
            "PUBSUB_EMULATOR_HOST": pubsub,
            "FIRESTORE_EMULATOR_HOST": firestore,
            "FINAL_TOPIC": "final",
            "DEAD_LETTER_TOPIC": "dead-letter",
            "STORE_BACKEND": o.store_backend,
            "TASKS_QUEUE": self.queue,
            "TASKS_TARGET": "http",
            "RELAY_URL": relay_url,
            "TASKS_SERVICE_ACCOUNT": INVOKER,
            "CLOUD_TASKS_EMULATOR_HOST": f"127.0.0.1:{tasks_port}",
            "OIDC_CERTS_URL": f"http://127.0.0.1:{oidc_port}/oauth2/v1/certs",
            **({"REDIS_URL": redis_url} if redis_url else {}),
            **o.extra_env,
        }
        # Our own clients (topology, queue) talk to the same emulators.
        os.environ.update(
            {k: self.env[k] for k in ("PUBSUB_EMULATOR_HOST", "FIRESTORE_EMULATOR_HOST")}
        )
        self.group.start(tasks_emulator(tasks_port, oidc_port=oidc_port))
        self._create_queue()
        self.group.start(relay(relay_port, app_dir=self.repo / "appengine/relay", env=self.env))
        self.group.start(
            cloud_function(
                "ingress",
                source=self.repo / "functions/ingress/main.py",
                target="ingress",
                port=ingress_port,
                env=self.env,
            )
        )
        self.topology = create_topology(o.project, ingress_url=f"http://127.0.0.1:{ingress_port}")

    def _emulators(self) -> tuple[str, str, str | None]:
        o = self.options
        if o.emulators is not None:
            return o.emulators.pubsub, o.emulators.firestore, o.emulators.redis_url
        pubsub_port, firestore_port = _port(o.pubsub_port), _port(o.firestore_port)
        self.group.start(emulators.pubsub_emulator(pubsub_port, self.work_dir))
        self.group.start(emulators.firestore_emulator(firestore_port, self.work_dir))
        redis_url = None
        if o.store_backend == "redis":
            redis_port = _port(o.redis_port)
            self.group.start(emulators.redis_server(redis_port))
            redis_url = f"redis://127.0.0.1:{redis_port}/0"
        return f"127.0.0.1:{pubsub_port}", f"127.0.0.1:{firestore_port}", redis_url

    def _create_queue(self) -> None:
        from google.cloud import tasks_v2

        from pubsub_toolkit.delay.scheduler import tasks_client

        client = tasks_client(self.env["CLOUD_TASKS_EMULATOR_HOST"])
        client.create_queue(
            parent=self.queue.rsplit("/queues/", 1)[0],
            queue=tasks_v2.Queue(
                name=self.queue,
                # Quick retries locally; Terraform sets production values.
                retry_config=tasks_v2.RetryConfig(
                    max_attempts=20,
                    min_backoff={"nanos": 100_000_000},
                    max_backoff={"seconds": 2},
                ),
                rate_limits=tasks_v2.RateLimits(
                    max_dispatches_per_second=500, max_concurrent_dispatches=100
                ),
            ),
            timeout=10,
        )

    def stop(self) -> None:
        self.group.stop_all()

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()
