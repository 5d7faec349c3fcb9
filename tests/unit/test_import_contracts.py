"""The import contracts of ``[tool.importlinter]`` (pyproject.toml) hold, and catch a break.

``lint-imports`` (also in ``make lint``) checks the library's layers (each imports only the
layers below it), no import cycle at any level of the library's packages or of the operator's
CLI (cli/, its own distribution) - deferred (function-level) and ``TYPE_CHECKING`` imports
count - that the library never imports the CLI or the local stack, and that the CLI never
imports the local stack. Here it runs on this checkout; then on a copy with one wrong-way
import, which it must refuse. A module no layer names would escape the layers check, so every
library module must be placed.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
# (folder, package): the library, the operator's CLI and the local stack, each its own distribution
PACKAGES = (
    ("shared", "pubsub_toolkit"),
    ("cli", "pubsub_toolkit_cli"),
    ("local", "pubsub_toolkit_local"),
)
LINT_IMPORTS = (  # the `lint-imports` console script, without depending on where it was installed
    "import sys; from importlinter.cli import lint_imports_command; "
    "sys.exit(lint_imports_command())"
)


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on the checkout (or copy) at ``root``: its pyproject.toml, its packages."""
    path = [
        str(root / "shared"),
        str(root / "cli"),
        str(root / "local"),
        os.environ.get("PYTHONPATH", ""),
    ]
    return subprocess.run(
        [sys.executable, "-c", LINT_IMPORTS, "--no-cache"],
        cwd=root,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def copy_of_the_checkout(tmp_path: Path) -> Path:
    """What lint-imports reads: pyproject.toml and the three packages' sources."""
    copy = tmp_path / "checkout"
    copy.mkdir()
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    ignore = shutil.ignore_patterns("__pycache__")
    for folder, package in PACKAGES:
        shutil.copytree(ROOT / folder / package, copy / folder / package, ignore=ignore)
    return copy


def add_deferred_import(module: Path, statement: str) -> None:
    """A function at the end of ``module`` whose body imports: the kind grimp must still see."""
    with module.open("a") as source:
        source.write(f"\n\ndef _probe() -> None:\n    {statement}  # noqa\n")


def test_the_import_contracts_hold() -> None:
    run = lint_imports(ROOT)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "6 kept, 0 broken" in run.stdout, run.stdout[-2000:]


def test_every_library_module_has_a_layer() -> None:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = next(c for c in contracts["contracts"] if c["type"] == "layers")["layers"]
    placed = {name.strip() for layer in layers for name in layer.split(":")}
    graph = grimp.build_graph("pubsub_toolkit", cache_dir=None)

    def in_a_layer(module: str) -> bool:
        return any(module == p or module.startswith(p + ".") for p in placed)

    faces = {m for m in graph.modules if (graph.find_children(m) and not in_a_layer(m))}
    # A package's __init__ (its face) may stay unplaced: what it imports is still checked, as a
    # link in any chain between layers. Every other module has a layer.
    unplaced = sorted(m for m in graph.modules if not in_a_layer(m) and m not in faces)
    assert unplaced == [], f"add these to a layer in pyproject.toml [tool.importlinter]: {unplaced}"


def test_a_deferred_import_of_the_local_stack_breaks_the_contract(tmp_path: Path) -> None:
    copy = copy_of_the_checkout(tmp_path)
    add_deferred_import(
        copy / "shared/pubsub_toolkit/tracing_setup.py", "import pubsub_toolkit_local"
    )
    run = lint_imports(copy)
    assert run.returncode == 1, run.stdout[-3000:]
    assert (
        "The library never imports the local stack (it depends on the library) BROKEN" in run.stdout
    )
    assert "pubsub_toolkit.tracing_setup -> pubsub_toolkit_local" in run.stdout


def test_a_deferred_import_of_the_cli_breaks_the_contract(tmp_path: Path) -> None:
    copy = copy_of_the_checkout(tmp_path)
    # metrics reading the operator's per-group status: the import issue 26 removed.
    add_deferred_import(
        copy / "shared/pubsub_toolkit/metrics.py", "import pubsub_toolkit_cli.group_status"
    )
    run = lint_imports(copy)
    assert run.returncode == 1, run.stdout[-3000:]
    assert (
        "The library never imports the operator's CLI (it depends on the library) BROKEN"
        in run.stdout
    )
    assert "pubsub_toolkit.metrics -> pubsub_toolkit_cli.group_status" in run.stdout


def test_the_cli_importing_the_local_stack_breaks_the_contract(tmp_path: Path) -> None:
    copy = copy_of_the_checkout(tmp_path)
    # The CLI finds the local stack's commands as entry points: importing it would be a cycle
    # between two distributions (the local stack depends on the CLI).
    add_deferred_import(copy / "cli/pubsub_toolkit_cli/cli/local.py", "import pubsub_toolkit_local")
    run = lint_imports(copy)
    assert run.returncode == 1, run.stdout[-3000:]
    assert "The CLI never imports the local stack (which depends on the CLI) BROKEN" in run.stdout
    assert "pubsub_toolkit_cli.cli.local -> pubsub_toolkit_local" in run.stdout


def test_a_cycle_through_a_deferred_import_breaks_the_contract(tmp_path: Path) -> None:
    copy = copy_of_the_checkout(tmp_path)
    # The sync processor handing off to the dispatcher above it: the cycle issue 26 removed.
    add_deferred_import(
        copy / "shared/pubsub_toolkit/consumer/processor_sync.py",
        "from pubsub_toolkit.consumer import processor",
    )
    run = lint_imports(copy)
    assert run.returncode == 1, run.stdout[-3000:]
    assert "No import cycles in the library, at any level of its packages BROKEN" in run.stdout


def test_an_import_up_the_layers_breaks_the_contract(tmp_path: Path) -> None:
    copy = copy_of_the_checkout(tmp_path)
    # The per-group status read (a store module) reaching up into the FIFO gate (a driver).
    add_deferred_import(
        copy / "shared/pubsub_toolkit/stores/fifo_state/status.py",
        "import pubsub_toolkit.consumer.gate",
    )
    run = lint_imports(copy)
    assert run.returncode == 1, run.stdout[-3000:]
    assert "each imports only the layers below it BROKEN" in run.stdout
    assert "pubsub_toolkit.stores.fifo_state.status -> pubsub_toolkit.consumer.gate" in run.stdout


def test_the_library_and_the_cli_load_what_depends_on_them_by_no_name() -> None:
    """An import by name (``importlib.import_module("pubsub_toolkit_local...")``) is invisible to
    lint-imports: no string of the library's code may name the CLI's or the local stack's
    package, nor the CLI's the local stack's. The local stack's commands are entry points it
    declares (``pubsub_toolkit.commands``); the CLI is a console script of its own."""
    never_named = {
        "pubsub_toolkit": ("pubsub_toolkit_cli", "pubsub_toolkit_local"),
        "pubsub_toolkit_cli": ("pubsub_toolkit_local",),
    }
    folders = {package: folder for folder, package in PACKAGES}
    naming = [
        f"{path.relative_to(ROOT)}:{node.lineno}: {name}"
        for package, names in never_named.items()
        for path in sorted((ROOT / folders[package] / package).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        for name in names
        if name in node.value
    ]
    assert naming == [], naming
