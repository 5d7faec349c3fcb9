"""The operator's CLI as its own distribution: ``pubsub-toolkit-cli`` (cli/) builds a wheel that
holds exactly its package, provides the ``pubsub-toolkit`` command and depends on the library
with the extras its commands need. (test_wheel.py installs it beside the library's wheel in a
fresh venv and runs the command.)"""

from __future__ import annotations

import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.requirements import Requirement

from tests.packaging.test_wheel import CLI_ROOT, build_cli_wheel

PACKAGE = "pubsub_toolkit_cli"


def test_the_cli_wheel_holds_its_package_and_provides_the_command(tmp_path: Path) -> None:
    wheel = build_cli_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(n for n in names if n.endswith(".dist-info/METADATA")).rsplit("/", 1)[0]
        metadata = Parser().parsestr(archive.read(f"{info}/METADATA").decode())
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    sources = {
        str(path.relative_to(CLI_ROOT))
        for path in (CLI_ROOT / PACKAGE).rglob("*.py")
        if "__pycache__" not in path.parts
    }
    # Every module of cli/pubsub_toolkit_cli and nothing of the library or the local stack.
    assert {n for n in names if not n.startswith(f"{info}/")} == sources
    assert {f"{PACKAGE}/unary_pull.py", f"{PACKAGE}/emulator.py"} <= sources
    assert "[console_scripts]\npubsub-toolkit = pubsub_toolkit_cli.cli:main" in entry_points
    assert metadata["Name"] == "pubsub-toolkit-cli"
    requires = [Requirement(r) for r in metadata.get_all("Requires-Dist") or []]
    library = [r for r in requires if r.name == "pubsub-toolkit"]
    assert len(library) == 1 and library[0].marker is None, requires
    assert {"tasks", "dashboard"} <= library[0].extras
