"""`local`, `demo` and trace's default file come from whichever installed distribution declares
them as entry points (the local stack does, in local/pyproject.toml): the library finds them by
name and never imports the local stack's package itself.

Each test runs the CLI in a fresh interpreter with a stand-in distribution first on the path:
its entry points, not the local stack's module, answer.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def stand_in(tmp_path: Path) -> Path:
    """A distribution ``stand-in`` serving ``local``, ``demo`` and a trace file."""
    (tmp_path / "stand_in.py").write_text(
        textwrap.dedent(
            """
            def run(argv):
                print("stand-in local", argv)
                return 3

            def demo(argv):
                print("stand-in demo", argv)
                return 0

            def trace_file():
                return "/nonexistent/stand-in-trace.jsonl"
            """
        )
    )
    info = tmp_path / "stand_in-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: stand-in\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[pubsub_toolkit.commands]\nlocal = stand_in:run\ndemo = stand_in:demo\n\n"
        "[pubsub_toolkit.trace_files]\nstand-in = stand_in:trace_file\n"
    )
    return tmp_path


def cli(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    python_path = [
        str(path),
        str(ROOT / "shared"),
        str(ROOT / "cli"),
        os.environ.get("PYTHONPATH", ""),
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in python_path if p)}
    env.pop("PUBSUB_TOOLKIT_TRACE_FILE", None)
    return subprocess.run(
        [sys.executable, "-m", "pubsub_toolkit_cli.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_local_runs_in_the_distribution_that_declares_it(tmp_path: Path) -> None:
    run = cli(stand_in(tmp_path), "local", "up", "--store-backend", "redis")
    assert run.returncode == 3, run.stderr
    assert run.stdout.strip() == "stand-in local ['up', '--store-backend', 'redis']"


def test_demo_runs_in_the_distribution_that_declares_it(tmp_path: Path) -> None:
    run = cli(stand_in(tmp_path), "demo")
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "stand-in demo []"


def test_trace_reads_the_file_a_distribution_names(tmp_path: Path) -> None:
    run = cli(stand_in(tmp_path), "trace", "some-key")
    assert run.returncode != 0  # the file does not exist: what matters is which file was read
    assert "/nonexistent/stand-in-trace.jsonl" in run.stderr, run.stderr
