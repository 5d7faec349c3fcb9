"""pyproject.toml as a package index and a user's resolver read it.

The classifiers are ones PyPI accepts (checked against trove-classifiers, the list PyPI validates
an upload with) and there are keywords; what the published metadata asks of a user's resolver
are ranges, never a development tool's exact pin: the tools live in PEP 735 dependency groups,
which are not published, and ``make install`` installs them with ``--group``. The links the
README gives the index page are checked on the built distribution in test_wheel.py.
"""

from __future__ import annotations

import re
import tomllib
from typing import Any

import trove_classifiers
from packaging.requirements import Requirement

from tests.conftest import repo_root

# The extras a user installs; every one is documented on the install page.
USER_EXTRAS = {
    "redis",
    "secrets",
    "tasks",
    "relay",
    "functions",
    "tracing",
    "otlp",
    "otlp-grpc",
    "dashboard",
    "metrics",
    "asyncio",
}


def pyproject() -> dict[str, Any]:
    return tomllib.loads((repo_root() / "pyproject.toml").read_text())


def group_requirements(groups: dict[str, list[Any]], name: str) -> list[Requirement]:
    """A dependency group's requirements, its ``include-group`` entries followed (PEP 735)."""
    found: list[Requirement] = []
    for entry in groups[name]:
        if isinstance(entry, dict):
            found += group_requirements(groups, entry["include-group"])
        else:
            found.append(Requirement(entry))
    return found


def test_classifiers_are_ones_pypi_accepts_and_there_are_keywords() -> None:
    project = pyproject()["project"]
    classifiers = project["classifiers"]
    assert [c for c in classifiers if c not in trove_classifiers.classifiers] == []
    assert [c for c in classifiers if c in trove_classifiers.deprecated_classifiers] == []
    # license is an SPDX expression (PEP 639): a License classifier beside it is refused.
    assert [c for c in classifiers if c.startswith("License ::")] == []
    assert "Typing :: Typed" in classifiers  # py.typed ships in the wheel
    python = re.fullmatch(r">=3\.(\d+)", project["requires-python"])
    assert python, project["requires-python"]
    assert f"Programming Language :: Python :: 3.{python[1]}" in classifiers
    assert len(project["keywords"]) >= 5
    assert {"pubsub", "deduplication", "fifo"} <= set(project["keywords"])


def test_published_extras_are_user_facing_ranges_and_the_tools_are_groups() -> None:
    config = pyproject()
    extras = config["project"]["optional-dependencies"]
    assert set(extras) == USER_EXTRAS
    pinned = [
        f"{extra}: {requirement}"
        for extra, requirements in extras.items()
        for requirement in map(Requirement, requirements)
        if any(spec.operator in ("==", "===") for spec in requirement.specifier)
    ]
    assert pinned == []
    groups = config["dependency-groups"]
    dev = {r.name.lower() for r in group_requirements(groups, "dev")}
    docs = {r.name.lower() for r in group_requirements(groups, "docs")}
    assert {"ruff", "mypy", "pytest", "build", "twine", "trove-classifiers"} <= dev
    assert {"mkdocs", "mkdocs-material", "mkdocstrings-python"} == docs
    assert docs <= dev  # `make install` gives the docs build its tools too


def test_make_install_installs_the_dev_group_and_only_declared_extras() -> None:
    makefile = (repo_root() / "Makefile").read_text()
    rule = makefile.split("$(VENV)/.installed:", 1)[1].split("\n\n", 1)[0]
    install = next(line for line in rule.splitlines() if " -e ." in line)
    assert re.search(r"\s--group[ =]dev(\s|$)", install), install
    requested = re.search(r"-e '\.\[([\w,]+)\]'", install)
    assert requested, install
    assert set(requested[1].split(",")) <= USER_EXTRAS, install
    assert "-e ./local" in install, install
    # --group arrived in pip 25.1: the rule upgrades pip before it installs.
    assert rule.index("--upgrade pip") < rule.index(install)
