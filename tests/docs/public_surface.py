"""The public surface as the Python API page declares it, and what the docs' code imports.

Public means: the top level (``pubsub_toolkit.__all__``) and each module the API page
(docs/reference/api.md) documents with a ``::: module`` directive, for the names its
``members`` option lists - a module named there without a list would make every name in it
public, so the tests refuse that. Everything else is internal and may move.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import yaml

import pubsub_toolkit

REPO = Path(__file__).resolve().parents[2]
API_PAGE = REPO / "docs" / "reference" / "api.md"
PAGES = [
    REPO / "README.md",
    REPO / "examples" / "README.md",
    *sorted((REPO / "docs").rglob("*.md")),
]
# A directive and its indented YAML options (blank lines included).
_DIRECTIVE = re.compile(r"^::: ([\w.]+)[ \t]*\n((?:(?:[ ]{4}.*)?\n)*)", re.MULTILINE)
TOP = "pubsub_toolkit"


def directives() -> dict[str, dict[str, object]]:
    """module -> the mkdocstrings options its directive on the API page sets."""
    found: dict[str, dict[str, object]] = {}
    for module, block in _DIRECTIVE.findall(API_PAGE.read_text()):
        parsed = yaml.safe_load(textwrap.dedent(block)) or {}
        found[module] = dict(parsed.get("options") or {})
    return found


def public_names() -> dict[str, frozenset[str]]:
    """module -> its public names: the top level's ``__all__``, another module's ``members``."""
    public: dict[str, frozenset[str]] = {}
    for module, options in directives().items():
        if module == TOP:
            public[module] = frozenset(set(pubsub_toolkit.__all__) - {"__version__"})
            continue
        members = options.get("members")
        assert isinstance(members, list) and members, f"{module}: list its public members"
        public[module] = frozenset(str(name) for name in members)
    return public


def snippet_imports() -> list[tuple[str, str, str | None]]:
    """(page, module, name) for each ``from pubsub_toolkit... import name`` - also a
    parenthesised one over several lines - and (page, module, None) for each
    ``import pubsub_toolkit...`` in a page's ``python`` code blocks."""
    found: list[tuple[str, str, str | None]] = []
    for page in PAGES:
        if not page.exists():
            continue
        where = str(page.relative_to(REPO))
        for block in re.findall(r"```python\n(.*?)```", page.read_text(), re.DOTALL):
            tree = ast.parse(block, filename=where)  # a snippet that is not Python fails here
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and _ours(node.module or ""):
                    found += [(where, str(node.module), alias.name) for alias in node.names]
                elif isinstance(node, ast.Import):
                    found += [(where, a.name, None) for a in node.names if _ours(a.name)]
    return found


def _ours(module: str) -> bool:
    return module == TOP or module.startswith(TOP + ".")
