"""`pubsub-toolkit local up | env | status | down`: the local stack as a background service.

``up`` starts every part (:class:`~.stack.LocalStack`) in its own process group on fixed,
configurable ports and records what it started in a state file; the processes outlive the
command. ``env`` prints the ``export`` lines a user's code needs, ``status`` shows what runs, and
``down`` stops every process group the state file names - nothing else.
"""

from __future__ import annotations

import json
import os
import shlex
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from google.api_core.exceptions import GoogleAPICallError

from pubsub_toolkit.errors import ToolkitError
from pubsub_toolkit_local.processes import (
    ServiceStartError,
    process_group_alive,
    stop_process_group,
)
from pubsub_toolkit_local.stack import LocalStack, StackOptions

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
    "FINAL_TOPIC",
    "DEAD_LETTER_TOPIC",
    "STORE_BACKEND",
    "REDIS_URL",
    "TASKS_QUEUE",
    "TASKS_TARGET",
    "RELAY_URL",
    "TASKS_SERVICE_ACCOUNT",
    "OIDC_CERTS_URL",
)


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
        )


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
            f"the local stack is already running (state in {path}); "
            "`pubsub-toolkit local down` stops it (or delete that file if it is stale)"
        )
    work = Path(tempfile.mkdtemp(prefix="pubsub-toolkit-local-"))
    try:
        stack = LocalStack(options, work, repo).start()
    except GoogleAPICallError as exc:  # creating the topology or the queue failed
        raise ServiceStartError(f"the stack started but could not be set up: {exc}") from exc
    state = StackState(
        project=options.project,
        work_dir=str(work),
        env={k: v for k, v in stack.env.items() if k in USER_ENV},
        services=[
            ServiceRecord(s.name, s.pid, s.port, str(s.log_path)) for s in stack.group.services
        ],
    )
    state.save(path)
    return state


def down(repo: Path) -> list[str]:
    """Stop every process group the state file names; return what was stopped."""
    path = state_path(repo)
    state = StackState.load(path)
    if state is None:
        return []
    stopped = [s.name for s in reversed(state.services) if stop_process_group(s.pid)]
    survivors = [s.name for s in state.services if process_group_alive(s.pid)]
    if survivors:
        raise ServiceStartError(f"could not stop: {', '.join(survivors)}")
    path.unlink()
    return stopped


def require_running(repo: Path) -> StackState:
    state = StackState.load(state_path(repo))
    if state is None:
        raise ToolkitError(
            "the local stack is not running; start it with `pubsub-toolkit local up`"
        )
    return state


def export_lines(state: StackState) -> list[str]:
    return [f"export {k}={shlex.quote(v)}" for k, v in sorted(state.env.items())]


def status_lines(state: StackState) -> list[str]:
    rows = [("service", "pid", "port", "state", "log")]
    for s in state.services:
        rows.append(
            (
                s.name,
                str(s.pid),
                str(s.port),
                "running" if process_group_alive(s.pid) else "DOWN",
                s.log,
            )
        )
    return format_table(rows)


def format_table(rows: Sequence[Sequence[str]]) -> list[str]:
    """Columns padded to their widest cell, two spaces apart (the runtime CLI's style; a copy,
    so this distribution uses only the runtime package's public modules)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
