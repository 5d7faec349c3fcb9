"""Every ``from pubsub_toolkit... import ...`` in the README's and the docs' code blocks names
something that exists - and something public: the top level's ``__all__``, or a name the Python
API page lists for a public module - and so does every dotted ``pubsub_toolkit.x.y`` the prose
puts in backticks: a module moved, a name renamed or an internal name in a how-to fails here,
not in a user's editor."""

from __future__ import annotations

import importlib
import re

import pytest

from tests.docs.public_surface import PAGES, REPO, TOP, public_names, snippet_imports


def test_the_pages_have_snippets_to_check() -> None:
    assert len(snippet_imports()) >= 10


@pytest.mark.parametrize(("page", "module", "name"), snippet_imports())
def test_a_snippet_import_resolves(page: str, module: str, name: str | None) -> None:
    imported = importlib.import_module(module)
    assert name is None or hasattr(imported, name), f"{page}: {module} has no {name}"


@pytest.mark.parametrize(("page", "module", "name"), snippet_imports())
def test_a_snippet_imports_only_what_is_public(page: str, module: str, name: str | None) -> None:
    public = public_names()
    assert module in public, (
        f"{page}: {module} is not a public module (the top level, or one the Python API page "
        f"documents: {sorted(public)})"
    )
    assert name is None or name in public[module], f"{page}: {name} is not public in {module}" + (
        f"; import it from {TOP}" if name in public[TOP] else ""
    )


def test_the_public_modules_are_importable_and_not_internal() -> None:
    public = public_names()
    assert TOP in public
    for module, names in public.items():
        assert not any(part.startswith("_") for part in module.split(".")), module
        imported = importlib.import_module(module)
        for name in names:
            assert not name.startswith("_"), f"{module}.{name}"
            assert hasattr(imported, name), f"{module} has no {name}"
        # The package docstring (help(pubsub_toolkit)) names every public module.
        assert module == TOP or module in (importlib.import_module(TOP).__doc__ or ""), module


DOTTED = re.compile(r"`(pubsub_toolkit(?:\.\w+)+)")


def _named_by_the_code() -> set[str]:
    """Dotted names the library, its CLI or the Terraform module spell out themselves: metric and
    span attribute names (``pubsub_toolkit.fifo.parked``) and the CLI's entry-point groups
    (``pubsub_toolkit.commands``) are names, not modules."""
    named: set[str] = set()
    code = (*(REPO / "shared").rglob("*.py"), *(REPO / "cli").rglob("*.py"))
    for source in (*code, *(REPO / "terraform").rglob("*.tf")):
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
