"""`pubsub-toolkit local up / status / env / down` as a user runs them."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from pubsub_toolkit_local.control import DEFAULT_PORTS, StackState
from pubsub_toolkit_local.processes import free_port, port_is_free, process_group_alive


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pubsub_toolkit_cli.cli", "local", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def port_flags(**fixed: int) -> list[str]:
    """Free ports for the parts of a firestore stack (--redis-port only goes with redis)."""
    flags = []
    for name in DEFAULT_PORTS:
        if name != "redis_port":
            flags += ["--" + name.replace("_", "-"), str(fixed.get(name) or free_port())]
    return flags


def test_up_status_env_down_leaves_nothing_behind(tmp_path: Path) -> None:
    env = {**os.environ, "PUBSUB_TOOLKIT_STATE_DIR": str(tmp_path)}
    started = cli(env, "up", *port_flags())
    assert started.returncode == 0, started.stderr
    state = StackState.load(tmp_path / "state.json")
    assert state is not None
    try:
        names = {s.name for s in state.services}
        assert names == {
            "pubsub-emulator",
            "firestore-emulator",
            "cloud-tasks-emulator",
            "relay",
            "ingress",
        }
        status = cli(env, "status")
        assert status.returncode == 0 and status.stdout.count("running") == 5, status.stdout
        shown = cli(env, "status", "--json", "--no-self-test")
        assert shown.returncode == 0, shown.stderr
        services = json.loads(shown.stdout)["services"]
        assert {(s["name"], s["state"]) for s in services} == {(n, "running") for n in names}
        exports = cli(env, "env").stdout
        # The consumer namespace the FIFO how-to's program needs, and the CLI's own default.
        assert "export PUBSUB_TOOLKIT_CONSUMER_ID=cli\n" in exports
        assert f"export PUBSUB_EMULATOR_HOST=127.0.0.1:{state.services[0].port}" in exports
        # Every part traces into one file in the stack's work directory (pubsub-toolkit trace).
        assert "export PUBSUB_TOOLKIT_TRACING=on\n" in exports
        assert f"export PUBSUB_TOOLKIT_TRACE_FILE={state.work_dir}/traces.jsonl\n" in exports
        again = cli(env, "up", *port_flags())
        assert again.returncode == 1 and "already running" in again.stderr  # a failed operation
    finally:
        stopped = cli(env, "down")
    assert stopped.returncode == 0, stopped.stderr
    assert not any(process_group_alive(s.pid) for s in state.services)
    assert not (tmp_path / "state.json").exists()
    assert cli(env, "status").returncode == 1  # "not running", said in one line


def test_a_busy_port_stops_the_rest_and_says_what_to_fix(tmp_path: Path) -> None:
    env = {**os.environ, "PUBSUB_TOOLKIT_STATE_DIR": str(tmp_path)}
    ports = {name: free_port() for name in DEFAULT_PORTS if name != "redis_port"}
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        ports["relay_port"] = busy = squatter.getsockname()[1]
        flags = [
            f for name, port in ports.items() for f in ("--" + name.replace("_", "-"), str(port))
        ]
        failed = cli(env, "up", *flags)
    assert failed.returncode == 1
    assert f"port {busy}" in failed.stderr and "already in use" in failed.stderr
    assert len(failed.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "state.json").exists()
    # The parts started before the relay were stopped again: their ports are free.
    for name in ("pubsub_port", "firestore_port", "tasks_port", "oidc_port"):
        assert port_is_free(ports[name]), name
