"""Session-scoped real servers for the integration tests, and the orphan check.

The official Pub/Sub and Firestore emulators and a real redis-server start once per test
session on free loopback ports, each in its own process group, and stop by process group at the
end. ``pytest_sessionfinish`` then fails the run if any of them is still alive. Tests isolate
themselves with a unique project id (both emulators keep projects apart) or a unique Redis key
prefix, so no reset is needed between tests. Under ``make test``'s worker processes
(pytest-xdist, a file per worker at a time) each worker starts its own servers; the longest
files are handed out first (``pytest_collection_modifyitems``) so that none of them is left
running alone at the end.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pubsub_toolkit_local import emulators
from pubsub_toolkit_local.processes import (
    STARTED,
    RunningService,
    ServiceSpec,
    free_port,
    process_group_alive,
    start_service,
)

# The files that take minutes (measured with --durations): started first, longest first, so the
# other worker runs the many short files meanwhile instead of waiting on one at the end.
LONGEST_FILES = (
    "tests/terraform/test_checks_catch_breakage.py",
    "tests/e2e/test_mixed_workload.py",
    "tests/e2e/test_local_restarts.py",
    "tests/deploy/test_deploy_scripts.py",
    "tests/simulation/test_simulation.py",
    "tests/e2e/test_guarantee_regressions.py",
    "tests/deploy/test_deploy_cloud_run.py",
    "tests/deploy/test_bundles.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest files' tests first (in that order), every other test after them as
    collected; the order within a file is kept."""
    rank = {name: index for index, name in enumerate(LONGEST_FILES)}
    root = Path(__file__).resolve().parent.parent

    def file_rank(item: pytest.Item) -> int:
        path = Path(str(item.path)).resolve()
        name = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
        return rank.get(name, len(LONGEST_FILES))

    items.sort(key=file_rank)  # stable: the collected order within each rank


def _start(spec: ServiceSpec, tmp_path_factory: pytest.TempPathFactory) -> RunningService:
    return start_service(spec, tmp_path_factory.mktemp(spec.name))


@pytest.fixture(scope="session")
def pubsub_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``host:port`` of a running Pub/Sub emulator; PUBSUB_EMULATOR_HOST points at it."""
    port = free_port()
    service = _start(
        emulators.pubsub_emulator(port, tmp_path_factory.mktemp("pubsub")), tmp_path_factory
    )
    host = f"127.0.0.1:{port}"
    os.environ["PUBSUB_EMULATOR_HOST"] = host
    yield host
    service.stop()
    os.environ.pop("PUBSUB_EMULATOR_HOST", None)


@pytest.fixture(scope="session")
def firestore_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``host:port`` of a running Firestore emulator; FIRESTORE_EMULATOR_HOST points at it."""
    port = free_port()
    service = _start(
        emulators.firestore_emulator(port, tmp_path_factory.mktemp("firestore")), tmp_path_factory
    )
    host = f"127.0.0.1:{port}"
    os.environ["FIRESTORE_EMULATOR_HOST"] = host
    yield host
    service.stop()
    os.environ.pop("FIRESTORE_EMULATOR_HOST", None)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``redis://`` URL of a running redis-server."""
    port = free_port()
    service = _start(emulators.redis_server(port), tmp_path_factory)
    yield f"redis://127.0.0.1:{port}/0"
    service.stop()


@pytest.fixture
def project_id() -> str:
    """A project id no other test uses: the emulators keep projects fully apart."""
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def unique() -> str:
    """A short unique suffix for names and key prefixes."""
    return uuid.uuid4().hex[:12]


def pytest_configure(config: pytest.Config) -> None:
    """``PUBSUB_TOOLKIT_TEST_MUTATION=ID`` runs the session with mutation ID of
    :mod:`tests.simulation.mutations` in force: how ``make sim-mutations`` shows that a fix only a
    test against a real server can see (a store's error replies, the asyncio factory) is still
    guarded by that test - the test must fail under the mutation."""
    defect = os.environ.get("PUBSUB_TOOLKIT_TEST_MUTATION")
    if not defect:
        return
    from tests.simulation.mutations import applied, mutations

    chosen = [m for m in mutations() if m.defect == defect]
    if not chosen:
        raise pytest.UsageError(f"PUBSUB_TOOLKIT_TEST_MUTATION={defect}: no such mutation")
    context = applied(chosen[0])
    context.__enter__()
    config.add_cleanup(lambda: context.__exit__(None, None, None))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run if any process group a test started (emulators, Redis, functions-framework,
    gunicorn, the Cloud Tasks emulator, ...) is still alive after its fixture stopped it."""
    # A service whose stop() saw its group gone is not looked at again: its id may have been
    # reused by another process group since (process ids wrap at pid_max, often 32,768).
    survivors = [
        f"{s.name} (pgid {s.pid})" for s in STARTED if not s.ended and process_group_alive(s.pid)
    ]
    for service in STARTED:
        service.stop()  # clean up regardless, so a failed run leaves nothing behind either
    if survivors:
        print(f"\nERROR: processes left running after the tests: {', '.join(survivors)}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    elif STARTED:
        print(f"\nall {len(STARTED)} server processes the tests started were stopped")


def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent
