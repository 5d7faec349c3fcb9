"""The package index page's long description: README.md without links that lead nowhere there.

Everything else about the distribution is in pyproject.toml (``readme`` is dynamic so that this
file supplies it). On a package index the README has no repository around it, so a link relative
to the checkout, such as ``[settings](docs/reference/settings.md)``, would break: the description
keeps the link's text and names the checkout's file instead. Absolute (http/https) links and
in-page anchors stay links. The README itself is unchanged: its relative links work where it is
read in the repository.
"""

from __future__ import annotations

import re
from pathlib import Path

from setuptools import setup

# An inline Markdown link: [text](target). The README has no images and no nested brackets.
LINK = re.compile(r"\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)\)")


def index_page_link(link: re.Match[str]) -> str:
    """The link as the index page shows it: kept if it resolves there, else text and file."""
    text, target = link["text"], link["target"]
    if target.startswith(("http://", "https://", "#")):
        return link[0]
    return f"{text} (`{target.split('#', 1)[0]}`)"


def long_description(readme: Path) -> str:
    """README.md with every link relative to the checkout turned into its text and file name."""
    return LINK.sub(index_page_link, readme.read_text(encoding="utf-8"))


setup(
    long_description=long_description(Path(__file__).resolve().parent / "README.md"),
    long_description_content_type="text/markdown",
)
