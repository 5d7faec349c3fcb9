"""`local env` and `local status --json` on a recorded stack state (no stack is started: the
state file names this test process's own group as a running service)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pubsub_toolkit_local import commands
from pubsub_toolkit_local.control import ServiceRecord, StackState


@pytest.fixture
def recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StackState:
    monkeypatch.setenv("PUBSUB_TOOLKIT_STATE_DIR", str(tmp_path))
    state = StackState(
        project="local-project",
        work_dir=str(tmp_path / "work"),
        env={"GOOGLE_CLOUD_PROJECT": "local-project", "PUBSUB_EMULATOR_HOST": "127.0.0.1:8751"},
        services=[ServiceRecord("pubsub-emulator", os.getpgid(0), 8751, "pubsub.log")],
    )
    state.save(tmp_path / "state.json")
    return state


@pytest.mark.usefixtures("recorded")
def test_local_env_exports_a_consumer_id_for_your_own_consumer(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """ConsumerSettings.from_env needs PUBSUB_TOOLKIT_CONSUMER_ID: the FIFO how-to's program runs as
    written;
    ``cli`` is the CLI's own default, so `subscribe` and `status` see the same groups."""
    assert commands.run(["env"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "export PUBSUB_TOOLKIT_CONSUMER_ID=cli" in lines
    assert "export GOOGLE_CLOUD_PROJECT=local-project" in lines


@pytest.mark.usefixtures("recorded")
def test_local_status_json_lists_each_service(capsys: pytest.CaptureFixture[str]) -> None:
    assert commands.run(["status", "--json", "--no-self-test"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "services": [
            {
                "name": "pubsub-emulator",
                "pid": os.getpgid(0),
                "port": 8751,
                "state": "running",
                "log": "pubsub.log",
            }
        ],
        "self_test": None,
    }
