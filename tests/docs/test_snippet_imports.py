"""Every ``from pubsub_toolkit... import ...`` in the README's and the docs' code blocks names
something that exists, and so does every dotted ``pubsub_toolkit.x.y`` the prose puts in
backticks: a module moved or a name renamed fails here, not in a user's editor."""

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


DOTTED = re.compile(r"`(pubsub_toolkit(?:\.\w+)+)")


def _named_by_the_code() -> set[str]:
    """Dotted names the library or the Terraform module spell out themselves: metric and span
    attribute names (``pubsub_toolkit.fifo.parked``) are names, not modules."""
    named: set[str] = set()
    for source in (*(REPO / "shared").rglob("*.py"), *(REPO / "terraform").rglob("*.tf")):
        named |= set(re.findall(r"[`\"'](pubsub_toolkit[\w.]*)[`\"']", source.read_text()))
    return named


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attribute in parts[split:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


def test_every_dotted_name_in_the_prose_exists() -> None:
    named = _named_by_the_code()
    stale = sorted(
        f"{page.relative_to(REPO)}: {dotted}"
        for page in PAGES
        if page.exists()
        for dotted in set(DOTTED.findall(page.read_text()))
        if dotted not in named and not _resolves(dotted)
    )
    assert stale == []
