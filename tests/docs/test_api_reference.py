"""The Python API page documents the whole public surface: every public name, and every
public class with each of its public methods and properties - checked in the built site by
the anchors mkdocstrings gives documented objects (``id="pubsub_toolkit.RedisBackend.counter"``).
A method without a docstring, a name left out of ``members`` or a public module missing from
the page fails here. It also checks that repository.md lists the top level as it is."""

from __future__ import annotations

import functools
import importlib
import inspect
import re
from pathlib import Path

import pytest

import pubsub_toolkit
from tests.docs.public_surface import REPO, public_names

_METHOD_KINDS = (staticmethod, classmethod, property, functools.cached_property)


def public_methods(cls: type) -> set[str]:
    """The public methods and properties ``cls`` defines or inherits from the toolkit's own
    classes (not those of ``object``, ``Exception``, ``Enum`` or a Protocol's machinery)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if not klass.__module__.startswith("pubsub_toolkit"):
            continue
        for name, value in vars(klass).items():
            if not name.startswith("_") and (
                inspect.isfunction(value) or isinstance(value, _METHOD_KINDS)
            ):
                names.add(name)
    return names


def documented_objects() -> list[tuple[str, str]]:
    """(module, dotted name below it) for every public name and every public class's method."""
    expected: list[tuple[str, str]] = []
    for module, names in sorted(public_names().items()):
        imported = importlib.import_module(module)
        for name in sorted(names):
            expected.append((module, name))
            value = getattr(imported, name)
            if inspect.isclass(value):
                expected += [(module, f"{name}.{m}") for m in sorted(public_methods(value))]
    return expected


@pytest.fixture(scope="module")
def anchors(built_site: Path) -> set[str]:
    html = (built_site / "reference" / "api" / "index.html").read_text()
    return set(re.findall(r'id="(pubsub_toolkit[\w.]*)"', html))


def test_there_are_classes_with_methods_to_check() -> None:
    assert sum("." in name for _, name in documented_objects()) >= 30
    assert {"counter", "stats_store", "close"} <= public_methods(pubsub_toolkit.RedisBackend)


def test_every_public_name_and_method_is_on_the_api_page(anchors: set[str]) -> None:
    missing = [f"{m}.{name}" for m, name in documented_objects() if f"{m}.{name}" not in anchors]
    assert missing == [], "not on the API page: " + ", ".join(missing)


def test_the_package_docstring_renders_no_stray_markup(built_site: Path) -> None:
    html = (built_site / "reference" / "api" / "index.html").read_text()
    text = re.sub(r"<[^>]+>", "", html)
    stray = re.findall(r"\w+::(?=\s)", text)  # reST's "text::" before a literal block
    assert stray == [], f"reST markup shows on the API page: {stray}"


def test_repository_md_lists_the_top_level_as_exported() -> None:
    layout = (REPO / "docs" / "reference" / "repository.md").read_text()
    entry = re.search(r"^__init__\.py .*?:(.*?)\n(?=\S)", layout, re.MULTILINE | re.DOTALL)
    assert entry, "repository.md has no __init__.py line"
    listed = set(re.findall(r"\w+", entry.group(1)))
    assert listed == set(pubsub_toolkit.__all__) - {"__version__"}
