"""The documentation site builds with ``mkdocs build --strict``: a broken link, anchor or API
name in docs/ (or a public name that lost its docstring target) fails the suite."""

from __future__ import annotations

from pathlib import Path


def test_the_docs_site_builds_strict(built_site: Path) -> None:
    api = (built_site / "reference" / "api" / "index.html").read_text()
    # The API page documents the public surface, not only the package docstring.
    for name in ("Publisher", "Consumer", "IdempotentProcessor", "FifoGate"):
        assert name in api, f"{name} missing from the API reference"
