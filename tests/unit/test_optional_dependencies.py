"""The core installs with google-cloud-pubsub and google-cloud-firestore only.

Each test runs a fresh interpreter in which the optional dependencies cannot be imported (a
meta-path finder refuses them, as if their extras were not installed) and checks that
``import pubsub_toolkit`` and every public module still import without pulling any of them in,
that using an optional part says which extra to install, and that the CLI's local commands say
how to install the local stack.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

# Top-level names of what the extras bring (and the local stack's own distribution). requests
# is in [relay] too, but google-api-core (a core dependency) always brings it.
OPTIONAL = (
    "flask",
    "functions_framework",
    "jwt",
    "redis",
    "google.cloud.tasks",
    "google.cloud.secretmanager",
)
LOCAL = "pubsub_toolkit_local"

BLOCKER = textwrap.dedent(
    """
    import importlib.abc, sys

    BLOCKED = {blocked!r}

    class Absent(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if any(name == b or name.startswith(b + ".") for b in BLOCKED):
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, Absent())
    """
)


def run_without_extras(body: str) -> subprocess.CompletedProcess[str]:
    """Run ``body`` in ``python -I`` with the optional dependencies made unimportable."""
    blocked = (*OPTIONAL, "google.cloud.tasks_v2", LOCAL)
    script = BLOCKER.format(blocked=blocked) + textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-I", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_every_public_module_imports_with_the_core_only() -> None:
    run = run_without_extras(
        """
        import json, pkgutil, sys
        import pubsub_toolkit

        names = ["pubsub_toolkit"]
        for info in pkgutil.walk_packages(pubsub_toolkit.__path__, "pubsub_toolkit."):
            leaf = info.name.rsplit(".", 1)[-1]
            if leaf == "__main__" or leaf.startswith("_"):  # __main__ runs the CLI
                continue
            __import__(info.name)
            names.append(info.name)
        loaded = sorted(
            m for m in sys.modules
            if m.split(".")[0] in {"flask", "functions_framework", "jwt", "redis",
                                   "pubsub_toolkit_local"}
            or m.startswith("google.cloud.tasks")
        )
        print(json.dumps({"modules": names, "optional_loaded": loaded}))
        """
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["optional_loaded"] == []
    # The walk really covered the library, not just its top.
    assert len(report["modules"]) > 30, report["modules"]


def test_the_top_level_package_is_cheap_and_exports_its_surface() -> None:
    run = run_without_extras(
        """
        import json, sys
        import pubsub_toolkit
        # A bare import loads nothing else: every submodule import runs this package first.
        eager = sorted(m for m in sys.modules
                       if m.startswith(("pubsub_toolkit.", "google.cloud.pubsub")))
        surface = {name: type(getattr(pubsub_toolkit, name)).__name__
                   for name in pubsub_toolkit.__all__}
        print(json.dumps({"all": sorted(surface), "version": pubsub_toolkit.__version__,
                          "eager": eager}))
        """
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert {
        "Publisher",
        "Consumer",
        "IdempotentProcessor",
        "MessageProcessor",
        "idempotent",
    } <= set(report["all"])
    # Loadable without the redis extra: the backends import redis when one is made.
    assert {"Message", "Settings", "ConsumerSettings", "RedisBackend"} <= set(report["all"])
    assert report["version"]
    assert report["eager"] == []


def test_using_an_optional_part_names_its_extra() -> None:
    run = run_without_extras(
        """
        import json
        from pubsub_toolkit.errors import MissingDependencyError

        said = {}

        def attempt(label, call):
            try:
                call()
            except MissingDependencyError as exc:
                assert isinstance(exc, ImportError)
                said[label] = str(exc)

        from pubsub_toolkit.delay.scheduler import tasks_client
        attempt("tasks", tasks_client)
        from pubsub_toolkit_cli.dashboard.app import create_app
        attempt("dashboard", lambda: create_app(lambda: None))
        from pubsub_toolkit.stores.dedup.redis import RedisDedupStore
        attempt("redis", lambda: RedisDedupStore.from_url("redis://127.0.0.1:9/0"))
        from pubsub_toolkit._secrets import read_secret_manager
        attempt("secrets", lambda: read_secret_manager("projects/p/secrets/s/versions/1"))
        from pubsub_toolkit.stores.backends.redis import RedisBackend
        attempt("redis backend", lambda: RedisBackend.from_url("redis://127.0.0.1:9/0"))
        from pubsub_toolkit.config import Settings
        from pubsub_toolkit.stores.factory import backend_from_settings
        memory = backend_from_settings(
            Settings(project="p", final_topic="t", dead_letter_topic="d", store_backend="memory")
        )
        said["memory"] = memory.name  # the memory backend needs no extra
        print(json.dumps(said))
        """
    )
    assert run.returncode == 0, run.stderr[-3000:]
    said = json.loads(run.stdout.strip().splitlines()[-1])
    for extra in ("tasks", "dashboard", "redis", "secrets"):
        assert f"pip install 'pubsub-toolkit[{extra}]'" in said.get(extra, ""), said
    assert said["redis backend"] == (
        "the Redis backend needs redis: pip install 'pubsub-toolkit[redis]'"
    )
    assert said["memory"] == "memory"


def test_the_local_commands_say_how_to_install_the_local_stack() -> None:
    for command in (["local", "status"], ["local", "up", "--help"], ["demo"]):
        run = run_without_extras(
            f"""
            import sys
            from pubsub_toolkit_cli.cli import main
            sys.exit(main({command!r}))
            """
        )
        assert run.returncode == 2, (command, run.stdout, run.stderr)
        assert run.stderr.strip() == (
            "pubsub-toolkit: error: the local stack is not installed: "
            "pip install -e ./local from a checkout"
        ), command
