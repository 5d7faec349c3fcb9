"""Shared benchmark plumbing: local servers, timing, and writing results."""

from __future__ import annotations

import json
import os
import platform
import signal
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

from pubsub_toolkit_local import emulators
from pubsub_toolkit_local.processes import ServiceGroup, free_port

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Servers:
    pubsub: str
    firestore: str
    redis_url: str


@contextmanager
def local_servers() -> Iterator[Servers]:
    """The Pub/Sub and Firestore emulators and redis-server, stopped on exit."""
    work = Path(tempfile.mkdtemp(prefix="pubsub-toolkit-bench-"))
    with ServiceGroup(work) as group:
        ports = free_port(), free_port(), free_port()
        group.start(emulators.pubsub_emulator(ports[0], work))
        group.start(emulators.firestore_emulator(ports[1], work))
        group.start(emulators.redis_server(ports[2]))
        os.environ["PUBSUB_EMULATOR_HOST"] = f"127.0.0.1:{ports[0]}"
        os.environ["FIRESTORE_EMULATOR_HOST"] = f"127.0.0.1:{ports[1]}"
        yield Servers(
            os.environ["PUBSUB_EMULATOR_HOST"],
            os.environ["FIRESTORE_EMULATOR_HOST"],
            f"redis://127.0.0.1:{ports[2]}/0",
        )


def stop_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit: its default would skip the ``with`` exits (a
    ``LocalStack``, a ``ServiceGroup``) and leave their servers running."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def rate(items: int, work: Callable[[int], object], *, threads: int) -> float:
    """Items per second for ``work(i)`` over ``items`` items on ``threads`` threads."""
    start = time.perf_counter()
    if threads == 1:
        for i in range(items):
            work(i)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(work, range(items)))
    return items / (time.perf_counter() - start)


def median(values: list[float]) -> float:
    return float(statistics.median(values))


def write_result(name: str, payload: dict[str, object], directory: Path | None = None) -> Path:
    """Write ``<directory>/<name>.json`` (default ``bench/results``) with the machine's
    description."""
    directory = RESULTS if directory is None else directory
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    document = {
        "benchmark": name,
        "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        **payload,
    }
    path.write_text(json.dumps(document, indent=2) + "\n")
    return path
