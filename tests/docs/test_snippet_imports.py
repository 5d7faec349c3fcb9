"""Every ``from pubsub_toolkit... import ...`` in the README's and the docs' code blocks names
something that exists: a module moved or a name renamed fails here, not in a user's editor."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [
    REPO / "README.md",
    REPO / "examples" / "README.md",
    *sorted((REPO / "docs").rglob("*.md")),
]
IMPORT = re.compile(r"^\s*from (pubsub_toolkit[\w.]*) import \(?([\w, ]+)\)?", re.MULTILINE)


def snippet_imports() -> list[tuple[str, str, str]]:
    found = []
    for page in PAGES:
        if not page.exists():
            continue
        for block in re.findall(r"```python\n(.*?)```", page.read_text(), re.DOTALL):
            for module, names in IMPORT.findall(block):
                for name in (n.strip() for n in names.split(",")):
                    if name:
                        found.append((str(page.relative_to(REPO)), module, name))
    return found


def test_the_pages_have_snippets_to_check() -> None:
    assert len(snippet_imports()) >= 10


@pytest.mark.parametrize(("page", "module", "name"), snippet_imports())
def test_a_snippet_import_resolves(page: str, module: str, name: str) -> None:
    imported = importlib.import_module(module)
    assert hasattr(imported, name), f"{page}: {module} has no {name}"
