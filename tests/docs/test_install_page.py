"""The install page's extras table lists every extra pyproject.toml declares (a new extra that
the docs forget is one a user never finds)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_extra_is_in_the_install_table() -> None:
    extras = set(
        tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    listed = set(re.findall(r"^\| `([\w-]+)` \|", (REPO / "docs" / "index.md").read_text(), re.M))
    assert extras == listed
