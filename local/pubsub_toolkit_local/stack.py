"""The whole pipeline on one machine, wired the way Google Cloud wires it.

    origin --push--> ingress (functions-framework) --> Cloud Tasks emulator --> relay (gunicorn)
       \\-------------------------------------------------------------------------> final

The official Pub/Sub and Firestore emulators and Redis are started too, unless the caller
passes hosts of running ones (the test session shares its emulators). Every process runs in its
own process group and :meth:`LocalStack.stop` stops them all. Each part can be rebuilt alone
from the same options (:meth:`LocalStack.spec`, :meth:`LocalStack.set_up`), which is how
``pubsub-toolkit local restart PART`` restarts one of them on its recorded port.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pubsub_toolkit.errors import ToolkitError
from pubsub_toolkit_local import emulators
from pubsub_toolkit_local.processes import ServiceGroup, ServiceSpec, free_port
from pubsub_toolkit_local.servers import cloud_function, relay, tasks_emulator
from pubsub_toolkit_local.topology import PUSH_MAX_DELIVERY_ATTEMPTS, Topology, create_topology

INVOKER = "tasks-invoker@local-project.iam.gserviceaccount.com"
LOCATION = "local"
QUEUE_ID = "pubsub-toolkit-delay"
LOCAL_TASK_ATTEMPTS = 20  # quick local retries; the relay must know the same budget
TRACE_FILE_NAME = "traces.jsonl"
# The parts a user can name (``local restart PART``) and the service each one runs.
PARTS = {
    "pubsub": "pubsub-emulator",
    "firestore": "firestore-emulator",
    "redis": "redis",
    "tasks": "cloud-tasks-emulator",
    "relay": "relay",
    "ingress": "ingress",
}


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
    # Keep Firestore's and Redis's data here across restarts (see emulators.py for what the
    # emulators allow); None: every part starts empty.
    persist_dir: str | None = None
    # Every part traces each message (PUBSUB_TOOLKIT_TRACING=on) into one file in the work
    # directory, PUBSUB_TOOLKIT_TRACE_FILE, which `pubsub-toolkit trace KEY` reads (`local up` and
    # the demo turn it on); False: PUBSUB_TOOLKIT_TRACING=off, no spans.
    tracing: bool = False
    # The push subscription's dead-letter policy: pushes before Pub/Sub moves a message to the
    # dead-letter topic (5-100; tests use 5 for a quick end).
    push_max_delivery_attempts: int = PUSH_MAX_DELIVERY_ATTEMPTS


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
        self.ports: dict[str, int] = {}
        self.topology: Topology | None = None
        self.queue = f"projects/{options.project}/locations/{LOCATION}/queues/{QUEUE_ID}"
        self._plan()

    @property
    def persist(self) -> Path | None:
        return None if self.options.persist_dir is None else Path(self.options.persist_dir)

    def parts(self) -> list[str]:
        """The parts this stack runs, in start order."""
        own = [] if self.options.emulators is not None else ["pubsub", "firestore"]
        if self.options.emulators is None and self.options.store_backend == "redis":
            own.append("redis")
        return [*own, "tasks", "relay", "ingress"]

    def start(self) -> LocalStack:
        """Start every part, create the topology and the queue; stop all if any part fails."""
        try:
            for part in self.parts():
                self.group.start(self.spec(part))
                if part == "tasks":
                    self._create_queue()
            self.topology = self._create_topology()
        except BaseException:
            self.group.stop_all()
            raise
        return self

    def _plan(self) -> None:
        """Ports and the environment every part and the user's code read."""
        o = self.options
        for name in ("pubsub", "firestore", "redis", "tasks", "oidc", "ingress", "relay"):
            self.ports[name] = _port(getattr(o, f"{name}_port"))
        if o.emulators is not None:
            pubsub, firestore, redis_url = (
                o.emulators.pubsub,
                o.emulators.firestore,
                o.emulators.redis_url,
            )
        else:
            pubsub = f"127.0.0.1:{self.ports['pubsub']}"
            firestore = f"127.0.0.1:{self.ports['firestore']}"
            redis_url = (
                f"redis://127.0.0.1:{self.ports['redis']}/0" if o.store_backend == "redis" else None
            )
        relay_url = o.relay_public_url or f"http://127.0.0.1:{self.ports['relay']}"
        self.env = {
            "GOOGLE_CLOUD_PROJECT": o.project,
            "PUBSUB_EMULATOR_HOST": pubsub,
            "FIRESTORE_EMULATOR_HOST": firestore,
            "PUBSUB_TOOLKIT_FINAL_TOPIC": "final",
            "PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC": "dead-letter",
            "PUBSUB_TOOLKIT_STORE_BACKEND": o.store_backend,
            "PUBSUB_TOOLKIT_TASKS_QUEUE": self.queue,
            "PUBSUB_TOOLKIT_TASKS_TARGET": "http",
            "PUBSUB_TOOLKIT_RELAY_URL": relay_url,
            "PUBSUB_TOOLKIT_TASKS_SERVICE_ACCOUNT": INVOKER,
            # The queue's max_attempts (_create_queue): on that attempt the relay dead-letters a
            # message it still cannot release instead of letting the queue drop it.
            "PUBSUB_TOOLKIT_TASKS_MAX_ATTEMPTS": str(LOCAL_TASK_ATTEMPTS),
            "CLOUD_TASKS_EMULATOR_HOST": f"127.0.0.1:{self.ports['tasks']}",
            "PUBSUB_TOOLKIT_OIDC_CERTS_URL": f"http://127.0.0.1:{self.ports['oidc']}/oauth2/v1/certs",
            **({"PUBSUB_TOOLKIT_REDIS_URL": redis_url} if redis_url else {}),
            **self.tracing_env(),
            **o.extra_env,
        }
        # Our own clients (topology, queue, self-test) talk to the same emulators.
        os.environ.update(
            {k: self.env[k] for k in ("PUBSUB_EMULATOR_HOST", "FIRESTORE_EMULATOR_HOST")}
        )

    @property
    def trace_file(self) -> Path:
        """Where every part appends its spans (when tracing is on)."""
        return self.work_dir / TRACE_FILE_NAME

    def tracing_env(self) -> dict[str, str]:
        """``PUBSUB_TOOLKIT_TRACING`` and ``PUBSUB_TOOLKIT_TRACE_FILE`` for the parts and the
        user's code (one shared file)."""
        if not self.options.tracing:
            return {"PUBSUB_TOOLKIT_TRACING": "off"}
        return {"PUBSUB_TOOLKIT_TRACING": "on", "PUBSUB_TOOLKIT_TRACE_FILE": str(self.trace_file)}

    def spec(self, part: str) -> ServiceSpec:
        """How to run ``part`` (one of :data:`PARTS`) on its port."""
        ports, persist = self.ports, self.persist
        if part == "pubsub":
            return emulators.pubsub_emulator(ports["pubsub"], self.work_dir)
        if part == "firestore":
            return emulators.firestore_emulator(
                ports["firestore"],
                self.work_dir,
                import_from=None if persist is None else emulators.latest_firestore_export(persist),
            )
        if part == "redis":
            data_dir = None if persist is None else persist / "redis"
            return emulators.redis_server(ports["redis"], data_dir=data_dir)
        if part == "tasks":
            return tasks_emulator(ports["tasks"], oidc_port=ports["oidc"])
        if part == "relay":
            return relay(ports["relay"], app_dir=self.repo / "appengine/relay", env=self.env)
        if part == "ingress":
            return cloud_function(
                "ingress",
                source=self.repo / "functions/ingress/main.py",
                target="ingress",
                port=ports["ingress"],
                env=self.env,
            )
        raise ToolkitError(f"unknown part {part!r}; choose one of {', '.join(PARTS)}")

    def set_up(self, part: str) -> None:
        """What a freshly (re)started ``part`` needs: the topology on an empty Pub/Sub
        emulator, the delay queue on an empty Cloud Tasks emulator."""
        if part == "pubsub":
            self.topology = self._create_topology()
        elif part == "tasks":
            self._create_queue()

    def _create_topology(self) -> Topology:
        ingress_url = f"http://127.0.0.1:{self.ports['ingress']}"
        return create_topology(
            self.options.project,
            ingress_url=ingress_url,
            push_max_delivery_attempts=self.options.push_max_delivery_attempts,
        )

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
                    max_attempts=LOCAL_TASK_ATTEMPTS,
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
