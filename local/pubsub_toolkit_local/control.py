"""`pubsub-toolkit local up | env | status | restart | heal | down`: the local stack as a service.

``up`` starts every part (:class:`~.stack.LocalStack`) in its own process group on fixed,
configurable ports and records what it started - and the options it started with - in a state
file; the processes outlive the command. ``env`` prints the ``export`` lines a user's code needs,
``status`` shows what runs, ``restart PART`` stops one part's process group and starts it again
on the same port (re-creating what an empty emulator lacks), ``heal`` un-sticks subscriptions
(:mod:`.pubsub_health`), and ``down`` stops every process group the state file names - nothing
else - after saying what that discards (or, with ``--persist``, exporting what can be kept).

About 340 lines: every command here reads and rewrites the same state file, so they stay together
(the counting lives in :mod:`.inventory`, the Pub/Sub self-test and heal in :mod:`.pubsub_health`).
"""

from __future__ import annotations

import json
import os
import shlex
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from google.api_core.exceptions import GoogleAPICallError

from pubsub_toolkit.errors import ToolkitError
from pubsub_toolkit_local import emulators, inventory
from pubsub_toolkit_local.processes import (
    ServiceStartError,
    process_group_alive,
    start_service,
    stop_process_group,
)
from pubsub_toolkit_local.stack import PARTS, LocalStack, StackOptions


def format_table(rows: Sequence[Sequence[str]]) -> list[str]:
    """Columns padded to their widest cell, two spaces apart (the runtime CLI's style; a copy,
    so this distribution uses only the runtime package's public modules)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]


# Defaults chosen away from the emulators' own defaults (8085, 8080) and common services.
DEFAULT_PORTS = {
    "pubsub_port": 8751,
    "firestore_port": 8752,
    "redis_port": 8753,
    "tasks_port": 8754,
    "oidc_port": 8755,
    "ingress_port": 8756,
    "relay_port": 8757,
}
USER_ENV = (
    "GOOGLE_CLOUD_PROJECT",
    "PUBSUB_EMULATOR_HOST",
    "FIRESTORE_EMULATOR_HOST",
    "CLOUD_TASKS_EMULATOR_HOST",
    "PUBSUB_TOOLKIT_FINAL_TOPIC",
    "PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC",
    "PUBSUB_TOOLKIT_STORE_BACKEND",
    "PUBSUB_TOOLKIT_REDIS_URL",
    "PUBSUB_TOOLKIT_TASKS_QUEUE",
    "PUBSUB_TOOLKIT_TASKS_TARGET",
    "PUBSUB_TOOLKIT_RELAY_URL",
    "PUBSUB_TOOLKIT_TASKS_SERVICE_ACCOUNT",
    "PUBSUB_TOOLKIT_OIDC_CERTS_URL",
    "PUBSUB_TOOLKIT_TRACING",
    "PUBSUB_TOOLKIT_TRACE_FILE",
)
USER_CONSUMER_ID = "cli"  # `local env`'s PUBSUB_TOOLKIT_CONSUMER_ID: the CLI's default consumer
_OPTION_FIELDS = ("project", "store_backend", "persist_dir", "tracing", *DEFAULT_PORTS)


@dataclass(frozen=True)
class ServiceRecord:
    name: str
    pid: int  # also the process group id: every service leads its own group
    port: int
    log: str


@dataclass(frozen=True)
class StackState:
    """What `local up` started; written to the state file."""

    project: str
    work_dir: str
    env: dict[str, str]
    services: list[ServiceRecord]
    options: dict[str, Any] = field(default_factory=dict)  # StackOptions fields, ports fixed

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> StackState | None:
        if not path.exists():
            return None
        doc = json.loads(path.read_text())
        return cls(
            project=doc["project"],
            work_dir=doc["work_dir"],
            env=doc["env"],
            services=[ServiceRecord(**s) for s in doc["services"]],
            options=doc.get("options", {}),
        )

    def service(self, name: str) -> ServiceRecord | None:
        return next((s for s in self.services if s.name == name), None)

    def stack(self, repo: Path) -> LocalStack:
        """A LocalStack with the recorded options and ports (nothing is started)."""
        if not self.options:
            raise ToolkitError(
                "this stack was started by an older version; `pubsub-toolkit local down` and "
                "`local up` once"
            )
        return LocalStack(StackOptions(**self.options), Path(self.work_dir), repo)


def state_path(repo: Path) -> Path:
    """Where `up` records what it started: PUBSUB_TOOLKIT_STATE_DIR, else .local-stack/."""
    configured = os.environ.get("PUBSUB_TOOLKIT_STATE_DIR", "").strip()
    return (Path(configured) if configured else repo / ".local-stack") / "state.json"


def up(repo: Path, options: StackOptions) -> StackState:
    """Start the stack in the background; refuse if one is already running."""
    path = state_path(repo)
    existing = StackState.load(path)
    if existing is not None and any(process_group_alive(s.pid) for s in existing.services):
        raise ToolkitError(
            f"the local stack is already running (state in {path}); restart one part with "
            "`pubsub-toolkit local restart PART`, or stop it with `pubsub-toolkit local down` "
            "(or delete that file if it is stale)"
        )
    work = Path(tempfile.mkdtemp(prefix="pubsub-toolkit-local-"))
    stack = LocalStack(options, work, repo)
    try:
        stack.start()
    except GoogleAPICallError as exc:  # creating the topology or the queue failed
        raise ServiceStartError(f"the stack started but could not be set up: {exc}") from exc
    recorded = {name: getattr(options, name) for name in _OPTION_FIELDS}
    recorded.update({f"{name}_port": port for name, port in stack.ports.items()})
    state = StackState(
        project=options.project,
        work_dir=str(work),
        env={k: v for k, v in stack.env.items() if k in USER_ENV},
        services=[
            ServiceRecord(s.name, s.pid, s.port, str(s.log_path)) for s in stack.group.services
        ],
        options=recorded,
    )
    state.save(path)
    return state


def use_emulators(state: StackState) -> None:
    """Point this process's clients at the stack's emulators (never at Google Cloud)."""
    os.environ.update(
        {k: state.env[k] for k in ("PUBSUB_EMULATOR_HOST", "FIRESTORE_EMULATOR_HOST")}
    )


def pubsub_log(state: StackState) -> str | None:
    record = state.service(PARTS["pubsub"])
    return None if record is None else record.log


def persistence_lines(state: StackState) -> list[str]:
    """What `up --persist` keeps and what it cannot (said once at `up`)."""
    persist = state.options.get("persist_dir")
    if not persist:
        return []
    kept = ["Firestore (dedup records, FIFO state, counters)"]
    if state.options.get("store_backend") == "redis":
        kept.append("Redis")
    return [
        f"persist: {' and '.join(kept)} kept in {persist} across `local down`/`up`; the Pub/Sub "
        "emulator and the Cloud Tasks emulator keep nothing (topics are recreated, waiting "
        "messages and scheduled deliveries are lost); message ids restart at 1, so give "
        "every message a dedup_key (one without is keyed by its id)",
    ]


def down(repo: Path) -> tuple[list[str], list[str]]:
    """Stop every process group the state file names. Returns (stopped, report lines): what
    was discarded, or kept with ``--persist``."""
    path = state_path(repo)
    state = StackState.load(path)
    if state is None:
        return [], []
    report = _before_stopping(state, [s.name for s in state.services])
    report.append(f"kept: this run's logs and traces in {state.work_dir} (remove it when done)")
    stopped = [s.name for s in reversed(state.services) if stop_process_group(s.pid)]
    survivors = [s.name for s in state.services if process_group_alive(s.pid)]
    if survivors:
        raise ServiceStartError(f"could not stop: {', '.join(survivors)}")
    path.unlink()
    return stopped, report


def _before_stopping(state: StackState, names: list[str]) -> list[str]:
    """Export what ``--persist`` keeps, count what is lost; one line per kind of data."""
    alive = {s.name for s in state.services if process_group_alive(s.pid)}
    use_emulators(state)
    persist = state.options.get("persist_dir")
    lines = []
    if PARTS["pubsub"] in names and PARTS["pubsub"] in alive:
        counts = inventory.undelivered_messages(state.project)
        detail = ", ".join(inventory.amount(n, f"on {name}") for name, n in counts.items())
        lines.append(f"discarded: undelivered messages ({detail}); the Pub/Sub emulator keeps none")
    if PARTS["tasks"] in names and PARTS["tasks"] in alive:
        waiting = inventory.amount(inventory.scheduled_tasks(state.env), "scheduled deliveries")
        lines.append(f"discarded: {waiting} (the Cloud Tasks emulator keeps none)")
    firestore = state.service(PARTS["firestore"])
    if firestore is not None and firestore.name in names and firestore.name in alive:
        documents = inventory.amount(
            inventory.firestore_documents(state.project), "Firestore documents"
        )
        if persist:
            export = emulators.export_firestore(firestore.port, state.project, Path(persist))
            lines.append(f"kept: {documents} (dedup records, FIFO state) exported to {export}")
        else:
            lines.append(
                f"discarded: {documents} (dedup records, FIFO state, counters); "
                "`local up --persist DIR` keeps them"
            )
    redis = state.service(PARTS["redis"])
    if redis is not None and redis.name in names and redis.name in alive:
        keys = inventory.amount(inventory.redis_keys(redis.port), "Redis keys")
        lines.append(
            f"kept: {keys} in {persist}/redis"
            if persist
            else f"discarded: {keys} (dedup records, FIFO state); "
            "`local up --persist DIR` keeps them"
        )
    return lines


def restart(repo: Path, part: str) -> list[str]:
    """Restart one part on its recorded port; returns what was lost and done, one line each."""
    state = require_running(repo)
    if part not in PARTS:
        raise ToolkitError(f"unknown part {part!r}; choose one of: {', '.join(PARTS)}")
    record = state.service(PARTS[part])
    if record is None:
        raise ToolkitError(
            f"{part} is not part of this stack (started with --store-backend "
            f"{state.options.get('store_backend', '?')}); nothing to restart"
        )
    stack = state.stack(repo)
    lines = _before_stopping(state, [record.name])
    stop_process_group(record.pid)
    if process_group_alive(record.pid):
        raise ServiceStartError(f"could not stop {record.name} (pgid {record.pid})")
    service = start_service(stack.spec(part), Path(record.log).parent)
    try:
        stack.set_up(part)
    except GoogleAPICallError as exc:
        raise ServiceStartError(f"{part} restarted but could not be set up: {exc}") from exc
    renewed = ServiceRecord(record.name, service.pid, service.port, str(service.log_path))
    services = [renewed if s.name == record.name else s for s in state.services]
    replace(state, services=services).save(state_path(repo))
    if part == "pubsub":
        lines.append("recreated the topics and subscriptions (empty)")
    elif part == "tasks":
        lines.append("recreated the delay queue (empty)")
    lines.append(f"restarted {part} (pid {service.pid}, port {service.port})")
    return lines


def heal(repo: Path, subscriptions: list[str]) -> list[str]:
    """Un-stick each named subscription of the stack's project (see :mod:`.pubsub_health`)."""
    from pubsub_toolkit_local.pubsub_health import heal as heal_one

    state = require_running(repo)
    use_emulators(state)
    lines = []
    for name in subscriptions:
        full = (
            name
            if name.startswith("projects/")
            else (f"projects/{state.project}/subscriptions/{name}")
        )
        lines.append(heal_one(full, save_dir=Path(state.work_dir)).line())
    return lines


def self_test_line(state: StackState) -> str:
    """One line: does the Pub/Sub emulator leave a stopped streaming subscriber stuck?"""
    from pubsub_toolkit_local.pubsub_health import self_test

    use_emulators(state)
    try:
        return self_test(state.project, log=pubsub_log(state)).line
    except GoogleAPICallError as exc:
        return f"pubsub emulator self-test: could not run ({exc})"


def require_running(repo: Path) -> StackState:
    state = StackState.load(state_path(repo))
    if state is None:
        raise ToolkitError(
            "the local stack is not running; start it with `pubsub-toolkit local up`"
        )
    return state


def export_lines(state: StackState) -> list[str]:
    """`local env`: the stack's environment, plus a PUBSUB_TOOLKIT_CONSUMER_ID for your own consumer
    (``ConsumerSettings.from_env`` requires one; ``cli`` is the CLI's default, so `subscribe`
    and `status` see the same dedup records and FIFO groups)."""
    env = {"PUBSUB_TOOLKIT_CONSUMER_ID": USER_CONSUMER_ID, **state.env}
    return [f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())]


def service_states(state: StackState) -> list[dict[str, Any]]:
    """Each service's name, pid, port, state (running or DOWN) and log."""
    return [
        {
            "name": s.name,
            "pid": s.pid,
            "port": s.port,
            "state": "running" if process_group_alive(s.pid) else "DOWN",
            "log": s.log,
        }
        for s in state.services
    ]


def status_lines(state: StackState) -> list[str]:
    rows: list[tuple[str, ...]] = [("service", "pid", "port", "state", "log")]
    columns = ("name", "pid", "port", "state", "log")
    rows += [tuple(str(s[c]) for c in columns) for s in service_states(state)]
    return format_table(rows)
