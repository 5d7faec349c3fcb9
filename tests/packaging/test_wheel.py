"""The distribution as a user's pip meets it: built, checked, installed into a fresh venv.

One test, in ``make test`` (about a minute here): ``python -m build`` makes the sdist and, from
it, the wheel; ``twine check --strict`` judges both as PyPI would; the long description (the
page an index shows) has no link that leads nowhere there - every one is absolute or an in-page
anchor - while every file the README links to exists in the checkout; the classifiers and
keywords are in the metadata; the wheel must hold the LICENSE, ``py.typed`` and every module
of the source tree, and neither the local stack (``pubsub_toolkit_local``), the Cloud Tasks
emulator, nor the operator's tooling and its emulator workarounds (``pubsub-toolkit-cli``, in
cli/). A fresh venv then installs the wheel with no extras: Flask, functions-framework, PyJWT,
Redis and google-cloud-tasks must not come with it, nor a ``pubsub-toolkit`` command, and
``import pubsub_toolkit``, the public names and every public module must import. With
``[redis]`` added, examples/dedup_subscriber.py runs in that venv against the session's real
redis-server and Pub/Sub emulator. Last, the CLI's wheel (:func:`build_cli_wheel`) installs
beside it and ``pubsub-toolkit --help`` runs. pip uses the index the machine configures.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from tests.conftest import repo_root

PACKAGE = "pubsub_toolkit"
# Distributions the extras bring, which a plain install must not (their PyPI names).
NOT_IN_CORE = ("flask", "functions-framework", "pyjwt", "redis", "google-cloud-tasks")
# The local stack, the Cloud Tasks emulator, and what the CLI's distribution (cli/) holds: the
# operator's tools and the emulator workarounds, which once lived in the library.
FORBIDDEN_PATHS = (
    "pubsub_toolkit_local",
    "tasks_emulator",
    "pubsub_toolkit_cli",
    f"{PACKAGE}/operations/",
    f"{PACKAGE}/consumer/unary_pull.py",
    f"{PACKAGE}/emulator.py",
)
CLI_ROOT = repo_root() / "cli"
# Links that work on a package index page, where no checkout surrounds the README.
INDEX_PAGE_LINKS = ("https://", "http://", "#")

# Run inside the fresh venv: what is installed, where the package lives, what imports.
PROBE = textwrap.dedent(
    """
    import importlib, importlib.metadata, json, pkgutil, sys

    installed = sorted({d.metadata["Name"].lower().replace("_", "-")
                        for d in importlib.metadata.distributions()})
    import pubsub_toolkit
    from pubsub_toolkit import Publisher, Consumer, IdempotentProcessor
    surface = {name: type(getattr(pubsub_toolkit, name)).__name__
               for name in pubsub_toolkit.__all__}
    modules = ["pubsub_toolkit"]
    for info in pkgutil.walk_packages(pubsub_toolkit.__path__, "pubsub_toolkit."):
        if any(part.startswith("_") for part in info.name.split(".")[1:]):
            continue  # private modules (and __main__, which runs the CLI)
        importlib.import_module(info.name)
        modules.append(info.name)
    optional = sorted(m for m in sys.modules
                      if m.split(".")[0] in {"flask", "functions_framework", "jwt", "redis",
                                             "pubsub_toolkit_cli", "pubsub_toolkit_local"}
                      or m.startswith("google.cloud.tasks"))
    print(json.dumps({"installed": installed, "file": pubsub_toolkit.__file__,
                      "version": pubsub_toolkit.__version__, "surface": surface,
                      "modules": modules, "optional_loaded": optional,
                      "classes": [Publisher.__name__, Consumer.__name__,
                                  IdempotentProcessor.__name__]}))
    """
)


def run(
    argv: list[str],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 240,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv``; fail the test with its output unless it exits 0."""
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, (
        f"{' '.join(argv)} exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done


def build_cli_wheel(outdir: Path) -> Path:
    """The wheel of the operator's CLI distribution (cli/), built from its sdist as the
    library's is (which leaves no build/ folder in the checkout)."""
    run([sys.executable, "-m", "build", "--outdir", str(outdir), str(CLI_ROOT)])
    wheels = sorted(outdir.glob("pubsub_toolkit_cli-*.whl"))
    assert len(wheels) == 1, sorted(p.name for p in outdir.iterdir())
    return wheels[0]


def link_targets(markdown: str) -> list[str]:
    """The target of every inline Markdown link, ``[text](target)``."""
    return re.findall(r"\[[^\]]*\]\(([^)\s]+)\)", markdown)


def source_modules() -> set[str]:
    """Every module file of the package in the source tree, as a path inside the wheel."""
    root = repo_root() / "shared"
    return {
        str(path.relative_to(root))
        for path in (root / PACKAGE).rglob("*.py")
        if "__pycache__" not in path.parts
    }


def public_module_names() -> set[str]:
    """The dotted names of the package's public modules in the source tree."""
    names = set()
    for path in source_modules():
        parts = path.removesuffix(".py").split("/")
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if not any(part.startswith("_") for part in parts[1:]):
            names.add(".".join(parts))
    return names


def venv_env() -> dict[str, str]:
    """The suite's environment without anything that would make the venv see the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(sys.prefix)
    )
    return env


@pytest.mark.timeout(420)
def test_the_wheel_builds_checks_and_installs_lean(
    tmp_path: Path, pubsub_emulator: str, redis_url: str, project_id: str
) -> None:
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "build", "--outdir", str(dist), str(repo_root())])
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(p.name for p in dist.iterdir())
    wheel, sdist = wheels[0], sdists[0]
    checked = run([sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)])
    assert checked.stdout.count("PASSED") == 2, checked.stdout

    # --- what the wheel holds -----------------------------------------------------------
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(metadata_name).decode())
    print(f"\nwheel {wheel.name}: {wheel.stat().st_size} bytes, {len(names)} files")
    assert f"{PACKAGE}/py.typed" in names
    assert any(re.fullmatch(r"[^/]+\.dist-info/licenses/LICENSE", n) for n in names), names
    assert [n for n in names if any(f in n for f in FORBIDDEN_PATHS)] == []
    assert {n for n in names if n.endswith(".py")} == source_modules()
    assert metadata["License-Expression"] == "Apache-2.0"
    assert "Typing :: Typed" in (metadata.get_all("Classifier") or [])
    assert "deduplication" in metadata["Keywords"].split(",")
    assert metadata["Description-Content-Type"] == "text/markdown"
    index_page = metadata.get_payload()
    assert "## Documentation" in index_page  # the README, whole
    assert [t for t in link_targets(index_page) if not t.startswith(INDEX_PAGE_LINKS)] == []
    readme_links = link_targets((repo_root() / "README.md").read_text())
    assert len(readme_links) > 40  # the README's documentation links are all counted
    relative = [t.split("#", 1)[0] for t in readme_links if not t.startswith(INDEX_PAGE_LINKS)]
    assert [t for t in relative if not (repo_root() / t).is_file()] == []
    core = sorted(
        re.split(r"[<>=!~ \[;]", r, maxsplit=1)[0].lower()
        for r in metadata.get_all("Requires-Dist") or []
        if "extra ==" not in r
    )
    assert core == ["google-cloud-firestore", "google-cloud-pubsub"], core
    assert {"redis", "tasks", "relay", "functions", "dashboard"} <= set(
        metadata.get_all("Provides-Extra") or []
    )
    with tarfile.open(sdist) as archive:
        sdist_names = archive.getnames()
    assert any(n.endswith("/LICENSE") for n in sdist_names)
    assert any(n.endswith(f"/{PACKAGE}/py.typed") for n in sdist_names)
    assert [n for n in sdist_names if any(f in n for f in FORBIDDEN_PATHS)] == []

    # --- a fresh venv, the wheel with no extras -----------------------------------------
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    python, pip = venv / "bin" / "python", venv / "bin" / "pip"
    env = venv_env()
    run([str(pip), "install", "-q", str(wheel)], env=env, cwd=tmp_path)
    probe = run([str(python), "-c", PROBE], env=env, cwd=tmp_path)
    report = json.loads(probe.stdout.strip().splitlines()[-1])
    assert [name for name in NOT_IN_CORE if name in report["installed"]] == []
    assert "pubsub-toolkit-local" not in report["installed"]
    assert "pubsub-toolkit-cli" not in report["installed"]
    assert {"pubsub-toolkit", "google-cloud-pubsub", "google-cloud-firestore"} <= set(
        report["installed"]
    )
    # The package imported is the installed wheel, not the checkout.
    assert Path(report["file"]).is_relative_to(venv), report["file"]
    assert report["version"] == metadata["Version"]
    assert report["classes"] == ["Publisher", "Consumer", "IdempotentProcessor"]
    assert {"Publisher", "Consumer", "IdempotentProcessor", "Settings"} <= set(report["surface"])
    assert set(report["modules"]) == public_module_names()
    assert len(report["modules"]) > 30, report["modules"]  # the walk covered the library
    assert report["optional_loaded"] == []
    # The command is the CLI distribution's (pubsub-toolkit-cli), not the library's.
    assert not (venv / "bin" / "pubsub-toolkit").exists()

    # --- with [redis]: the dedup example against a real redis-server --------------------
    run([str(pip), "install", "-q", f"{wheel}[redis]"], env=env, cwd=tmp_path)
    installed = run([str(pip), "list", "--format=json"], env=env, cwd=tmp_path)
    names_now = {p["name"].lower() for p in json.loads(installed.stdout)}
    assert "redis" in names_now
    assert [n for n in NOT_IN_CORE if n != "redis" and n in names_now] == []
    example = repo_root() / "examples" / "dedup_subscriber.py"
    example_env = {
        **env,
        "PUBSUB_EMULATOR_HOST": pubsub_emulator,
        "PUBSUB_TOOLKIT_REDIS_URL": redis_url,
        "GOOGLE_CLOUD_PROJECT": project_id,
    }
    for name in ("FIRESTORE_EMULATOR_HOST", "PUBSUB_TOOLKIT_STORE_BACKEND"):
        example_env.pop(name, None)
    done = run([str(python), str(example), "--store", "redis"], env=example_env, cwd=tmp_path)
    assert "ledger: order-1 booked 1x, order-2 booked 1x, order-3 booked 1x" in done.stdout
    assert "OK: " in done.stdout, done.stdout

    # --- the operator's CLI beside the installed library --------------------------------
    cli_wheel = build_cli_wheel(tmp_path / "cli-dist")
    run([str(pip), "install", "-q", str(cli_wheel)], env=env, cwd=tmp_path)
    installed = run([str(pip), "list", "--format=json"], env=env, cwd=tmp_path)
    versions = {p["name"].lower(): p["version"] for p in json.loads(installed.stdout)}
    assert versions["pubsub-toolkit"] == metadata["Version"]  # the wheel above, kept
    assert {"pubsub-toolkit-cli", "flask", "google-cloud-tasks"} <= set(versions)  # its extras
    cli = run([str(venv / "bin" / "pubsub-toolkit"), "--help"], env=env, cwd=tmp_path)
    assert "publish" in cli.stdout and "dashboard" in cli.stdout
