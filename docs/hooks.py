"""mkdocs hooks for the documentation site (listed under ``hooks:`` in mkdocs.yml).

The benchmark chart is written by ``make bench`` to ``bench/results/benchmarks.png``. A copy in
``docs/`` would go stale at the next run, and mkdocs (strict) refuses links that leave the docs
folder, so the build adds the current chart as ``assets/benchmarks.png`` instead.

The library's docstrings use Sphinx roles (``:class:`~pubsub_toolkit.errors.TransientError```),
which mkdocstrings leaves as text (":class:" before the code span); the build shows them as
plain code names instead, the way Sphinx would.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

# Repository files the site shows, by their path in the site and in the repository.
REPOSITORY_ASSETS = {"assets/benchmarks.png": "bench/results/benchmarks.png"}
# A Sphinx role as mkdocstrings renders it: the role's name, then the target as a code span.
_SPHINX_ROLE = re.compile(r":(?:mod|class|meth|func|attr|exc|data|obj):<code>(~?)\.?([^<]+)</code>")


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add each repository asset to the site; a missing one fails the build with its path."""
    root = Path(config.config_file_path).resolve().parent
    for site_path, repository_path in REPOSITORY_ASSETS.items():
        source = root / repository_path
        if not source.is_file():
            raise PluginError(
                f"{repository_path} is missing: the docs show it as {site_path} "
                "(it is committed; `make bench` rewrites it)"
            )
        files.append(File.generated(config, site_path, abs_src_path=str(source)))
    return files


def on_page_content(html: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Render Sphinx roles as code: ``~a.b.C`` as ``C`` (Sphinx's short form), else in full."""
    return _SPHINX_ROLE.sub(
        lambda m: f"<code>{m[2].rsplit('.', 1)[-1] if m[1] else m[2]}</code>", html
    )
