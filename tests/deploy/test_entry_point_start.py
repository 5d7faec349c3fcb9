"""A deployed entry point that cannot finish its start-up refuses every request, not just the first.

The functions read their settings on the first request (so a missing variable is a clear error in
the logs rather than a failed deployment health check). If a later step of that start-up fails -
``PUBSUB_TOOLKIT_METRICS_EXPORTER`` naming an unknown exporter, or ``cloud-monitoring`` without
its package in the bundle's requirements.txt - the request is answered 500 and Pub/Sub delivers
it again. Found on a trial deploy: the second request then ran on the half-built instance kept
from the first, so every later message was processed with no metrics export and (ingress) no
stats flusher, and the error was logged once per instance, never again. Each entry point is
started in its own interpreter, as on the platform, with the library from this tree and only
in-process stores (no server is reached: the clients connect lazily).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import repo_root

ROOT = repo_root()

# Settings that start every part with the in-memory stores and no delay path.
BASE_ENV = {
    "GOOGLE_CLOUD_PROJECT": "trial-project",
    "PUBSUB_EMULATOR_HOST": "127.0.0.1:9",  # never dialled: nothing is published here
    "PUBSUB_TOOLKIT_FINAL_TOPIC": "final",
    "PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC": "dead-letter",
    "PUBSUB_TOOLKIT_STORE_BACKEND": "memory",
    "PUBSUB_TOOLKIT_CONSUMER_ID": "billing",
    "PUBSUB_TOOLKIT_HANDLER": "example_handler:handle",
}


def start_twice(
    folder: str, call: str, extra_path: Path | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """Import the entry point's main.py and run its start-up twice, printing each outcome."""
    inherited = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PUBSUB_TOOLKIT_") and not k.endswith("_EMULATOR_HOST")
    }
    body = f"""
        import sys
        sys.path.insert(0, {str(ROOT / folder)!r})
        sys.path.insert(0, {str(extra_path or ROOT / folder)!r})
        import main
        from pubsub_toolkit.errors import ConfigurationError
        for attempt in (1, 2):  # the platform's first request, then Pub/Sub's redelivery
            try:
                made = {call}
            except ConfigurationError as exc:
                print(f"refused: {{exc}}")
            else:
                print(f"started: {{type(made).__name__}}")
        """
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(body)],
        env={**inherited, **BASE_ENV, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("folder", "call"),
    [("functions/ingress", "main._get_ingress()"), ("functions/consumer", "main._get_processor()")],
)
def test_a_function_whose_start_failed_refuses_the_next_request_too(folder: str, call: str) -> None:
    run = start_twice(
        folder, call, PUBSUB_TOOLKIT_METRICS_EXPORTER="prometheus", PUBSUB_TOOLKIT_TRACING="off"
    )
    assert run.returncode == 0, run.stderr
    refusal = (
        "refused: PUBSUB_TOOLKIT_METRICS_EXPORTER 'prometheus' is not one of "
        "off, cloud-monitoring, console"
    )
    assert run.stdout.splitlines() == [refusal, refusal], run.stdout + run.stderr


def test_an_async_handler_s_consumer_reads_the_metrics_settings_too(tmp_path: Path) -> None:
    """PUBSUB_TOOLKIT_HANDLER naming an ``async def`` runs on the async stores; its consumer
    exported no metrics and never read PUBSUB_TOOLKIT_METRICS_EXPORTER - not even to refuse a
    value that stops every other part (found on the same trial)."""
    (tmp_path / "async_handler.py").write_text("async def handle(message):\n    return 'ok'\n")
    run = start_twice(
        "functions/consumer",
        "main._get_processor()",
        extra_path=tmp_path,
        PUBSUB_TOOLKIT_HANDLER="async_handler:handle",
        PUBSUB_TOOLKIT_METRICS_EXPORTER="prometheus",
    )
    assert run.returncode == 0, run.stderr
    refusal = (
        "refused: PUBSUB_TOOLKIT_METRICS_EXPORTER 'prometheus' is not one of "
        "off, cloud-monitoring, console"
    )
    assert run.stdout.splitlines() == [refusal, refusal], run.stdout + run.stderr
    # With a valid exporter it starts, and keeps its instance.
    run = start_twice(
        "functions/consumer",
        "main._get_processor()",
        extra_path=tmp_path,
        PUBSUB_TOOLKIT_HANDLER="async_handler:handle",
        PUBSUB_TOOLKIT_METRICS_EXPORTER="console",
        PUBSUB_TOOLKIT_METRICS_EXPORT_SECONDS="3600",
    )
    assert run.returncode == 0, run.stderr
    # (The console exporter may print its last export at exit: only the outcomes count.)
    outcomes = [line for line in run.stdout.splitlines() if line.startswith(("started", "refused"))]
    assert outcomes == ["started: BlockingProcessor"] * 2, run.stdout


@pytest.mark.parametrize(
    ("folder", "call"),
    [("functions/ingress", "main._get_ingress()"), ("functions/consumer", "main._get_processor()")],
)
def test_a_function_that_started_keeps_its_instance(folder: str, call: str) -> None:
    """The control: with good settings both calls answer (the second from the kept instance)."""
    run = start_twice(folder, call, PUBSUB_TOOLKIT_STATS_FLUSH_SECONDS="0")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) == 2 and lines[0] == lines[1], run.stdout + run.stderr
    assert lines[0].startswith("started: "), run.stdout + run.stderr
