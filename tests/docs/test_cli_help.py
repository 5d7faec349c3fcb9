"""docs/reference/cli-help.md is the parsers' own ``--help`` output, every command included."""

from __future__ import annotations

from pathlib import Path

from tests.docs.cli_help import markdown, pages

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "cli-help.md"


def test_the_cli_help_page_matches_the_parsers() -> None:
    assert PAGE.read_text() == markdown(), (
        "the CLI changed: python -m tests.docs.cli_help > docs/reference/cli-help.md"
    )


def test_the_walk_reaches_nested_actions() -> None:
    commands = {" ".join(path) for path, _ in pages()}
    assert {"publish", "subscribe", "fifo skip", "dlq replay", "local up", "local down"} <= commands
