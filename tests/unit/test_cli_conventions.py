"""The command line's conventions, without servers: exit 1 for a failed operation and 2 for a
command that cannot run as given, ``--project``, and a missing extra named in one line.

The Pub/Sub side of each (a Google API error, ``--json`` output, ``--project`` reaching the
emulator) is in tests/integration/test_cli_conventions.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from google.auth.compute_engine import _metadata

from pubsub_toolkit_cli.cli import main
from tests.conftest import repo_root

MEMORY = {
    "GOOGLE_CLOUD_PROJECT": "p",
    "PUBSUB_TOOLKIT_STORE_BACKEND": "memory",
    "PUBSUB_TOOLKIT_FINAL_TOPIC": "final",
    "PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC": "dead-letter",
}
# Makes the named modules unimportable in a fresh interpreter, as if their extra were absent.
BLOCKER = """
import importlib.abc, sys
BLOCKED = {blocked!r}
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Absent())
from pubsub_toolkit_cli.cli import main
sys.exit(main({argv!r}))
"""


def errors(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().err.strip().splitlines()


@pytest.fixture
def memory_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in MEMORY.items():
        monkeypatch.setenv(name, value)


@pytest.mark.usefixtures("memory_env")
def test_a_failed_operation_exits_1_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fifo", "skip", "nogroup", "5"]) == 1
    assert errors(capsys) == ["pubsub-toolkit: error: group 'nogroup' waits for 1; cannot skip 5"]


@pytest.mark.usefixtures("memory_env")
def test_options_that_cannot_run_together_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dlq", "replay"]) == 2
    assert errors(capsys) == [
        "pubsub-toolkit: error: choose what to replay: --reason, --group, --id, or --all"
    ]


@pytest.mark.usefixtures("memory_env")
@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["publish", "--end-of-group", "x"],
            "--end-of-group needs --fifo-group: only a FIFO group can end",
        ),
        (
            ["publish", "--attr", "fifo_seq=1", "x"],
            "--attr fifo_seq: the FIFO attributes come from --fifo-group (numbered by the "
            "counter) and --end-of-group",
        ),
        (
            ["publish", "--attr", "fifo_group=g", "--fifo-group", "g", "x"],
            "--attr fifo_group: the FIFO attributes come from --fifo-group (numbered by the "
            "counter) and --end-of-group",
        ),
        (
            ["publish", "--dedup-key", "k", "--attr", "dedup_key=k2", "x"],
            "--attr dedup_key and --dedup-key: give the key once, with --dedup-key",
        ),
    ],
)
def test_publish_options_that_cannot_go_together_exit_2_before_any_client(
    capsys: pytest.CaptureFixture[str], argv: list[str], line: str
) -> None:
    """Refused in the CLI's own words (not the Publisher's keywords), as a usage error; no
    client is made (PUBSUB_EMULATOR_HOST is unset and there are no credentials here)."""
    assert main(argv) == 2
    assert errors(capsys) == [f"pubsub-toolkit: error: {line}"]


@pytest.mark.usefixtures("memory_env")
def test_fifo_replay_of_a_group_that_is_not_blocked_exits_1_and_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A misspelt group (or the wrong --consumer-id) is not reported "unblocked"."""
    assert main(["fifo", "replay", "nogroup", "--consumer-id", "billing"]) == 1
    assert errors(capsys) == [
        "pubsub-toolkit: error: group 'nogroup' is not blocked for consumer 'billing': nothing "
        "to replay (check the name and --consumer-id; `pubsub-toolkit status --consumer-id "
        "billing --group nogroup` shows it)"
    ]


def test_status_without_credentials_is_one_line_without_a_traceback(tmp_path: Path) -> None:
    """The status page's Cloud Monitoring reader finds no credentials first; its warning must
    not put a traceback before the command's one line (a subprocess: pytest captures logging)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PUBSUB_EMULATOR_HOST", "FIRESTORE_EMULATOR_HOST")
        and k != "GOOGLE_APPLICATION_CREDENTIALS"
    }
    env.update(MEMORY)
    env.update(
        HOME=str(tmp_path),
        CLOUDSDK_CONFIG=str(tmp_path),
        GCE_METADATA_HOST="127.0.0.1:9",
        GCE_METADATA_IP="127.0.0.1:9",
        NO_GCE_CHECK="true",
    )
    done = subprocess.run(
        [sys.executable, "-m", "pubsub_toolkit_cli.cli", "status"],
        env=env,
        cwd=repo_root(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("pubsub-toolkit: error: status: no Google credentials"), done.stderr


def test_a_missing_setting_exits_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "p")
    monkeypatch.delenv("PUBSUB_TOOLKIT_FINAL_TOPIC", raising=False)
    monkeypatch.setenv("PUBSUB_TOOLKIT_STORE_BACKEND", "memory")
    assert main(["fifo", "replay", "g"]) == 2
    assert errors(capsys) == [
        "pubsub-toolkit: error: final_topic (PUBSUB_TOOLKIT_FINAL_TOPIC) is required"
    ]


@pytest.mark.parametrize("before", [True, False])
def test_project_before_or_after_the_command_stands_for_google_cloud_project(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    before: bool,
) -> None:
    """With no GOOGLE_CLOUD_PROJECT, ``--project`` gets `dlq list` past the project check to
    the credentials (none here), and the environment is as it was afterwards."""
    for name in ("PUBSUB_EMULATOR_HOST", "GOOGLE_CLOUD_PROJECT", "GOOGLE_APPLICATION_CREDENTIALS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:9")
    monkeypatch.setattr(_metadata, "_NO_GCE_CHECK", True)
    assert main(["dlq", "list"]) == 2
    assert "GOOGLE_CLOUD_PROJECT is required" in errors(capsys)[0]
    argv = (
        ["--project", "my-project", "dlq", "list"]
        if before
        else ["dlq", "list", "--project", "my-project"]
    )
    assert main(argv) == 2
    [line] = errors(capsys)
    assert line.startswith("pubsub-toolkit: error: dlq: no Google credentials"), line
    assert "GOOGLE_CLOUD_PROJECT" not in os.environ


def test_project_is_refused_for_local(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--project", "p", "local", "status"])
    assert exited.value.code == 2
    assert errors(capsys) == [
        "pubsub-toolkit: error: --project is not for `local`: `local up --project P` names its "
        "project (see pubsub-toolkit --help)"
    ]


def run_without(
    blocked: tuple[str, ...], argv: list[str], **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(BLOCKER.format(blocked=blocked, argv=argv))],
        env={**os.environ, **env},
        cwd=repo_root(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("blocked", "argv", "env", "line"),
    [
        (
            ("flask", "werkzeug"),
            ["dashboard", "--port", "0"],
            MEMORY,
            "dashboard needs werkzeug: pip install 'pubsub-toolkit[dashboard]'",
        ),
        (
            ("redis",),
            ["fifo", "skip", "g", "1"],
            {
                **MEMORY,
                "PUBSUB_TOOLKIT_STORE_BACKEND": "redis",
                "PUBSUB_TOOLKIT_REDIS_URL": "redis://127.0.0.1:9/0",
            },
            "the Redis backend needs redis: pip install 'pubsub-toolkit[redis]'",
        ),
        (
            ("opentelemetry.exporter.cloud_trace",),
            ["publish", "x"],
            {**MEMORY, "PUBSUB_TOOLKIT_TRACING": "on", "OTEL_TRACES_EXPORTER": "gcp_trace"},
            "OTEL_TRACES_EXPORTER=gcp_trace needs opentelemetry-exporter-gcp-trace: pip install "
            "'pubsub-toolkit[tracing]'",
        ),
    ],
)
def test_a_missing_extra_is_named_in_one_line_and_exits_2(
    blocked: tuple[str, ...], argv: list[str], env: dict[str, str], line: str
) -> None:
    run = run_without(blocked, argv, **env)
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip().splitlines() == [f"pubsub-toolkit: error: {line}"]
