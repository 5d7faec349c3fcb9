"""docs/reference/cli.md's command table agrees with the parsers: every command is in it, and
every option it shows is spelled as that command's ``--help`` spells it (not an older alias)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from pubsub_toolkit_cli.cli import build_parser
from pubsub_toolkit_local.commands import build_parser as build_local_parser

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "cli.md"
_ROW = re.compile(r"^\| `([^`]*)` \|")
_OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


def leaf_parsers() -> dict[str, argparse.ArgumentParser]:
    """Every command that runs (``publish``, ``dlq list``, ``local up``, ...) and its parser."""
    found: dict[str, argparse.ArgumentParser] = {}

    def visit(parser: argparse.ArgumentParser, path: str) -> None:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            found[path.strip()] = parser
        for action in subs:
            for name, sub in action.choices.items():
                full = f"{path} {name}"
                visit(build_local_parser() if full.strip() == "local" else sub, full)

    visit(build_parser(), "")
    return found


def table_rows() -> dict[str, str]:
    """The table's first cells, by command (the words before the first argument or option)."""
    rows = {}
    for line in PAGE.read_text().splitlines():
        match = _ROW.match(line)
        if match is None:
            continue
        words = match.group(1).split()
        command = " ".join(w for w in words[:2] if re.fullmatch(r"[a-z]+", w))
        rows[command] = match.group(1)
    return rows


def test_every_command_is_in_the_table() -> None:
    assert set(leaf_parsers()) - set(table_rows()) == set()


def test_every_option_in_the_table_is_spelled_as_its_help_spells_it() -> None:
    parsers = leaf_parsers()
    wrong = []
    for command, cell in table_rows().items():
        parser = parsers[command]
        primary = {a.option_strings[0] for a in parser._actions if a.option_strings}
        for option in _OPTION.findall(cell):
            if option == "--PART-port":  # stands for each --pubsub-port, --redis-port, ...
                continue
            if option not in primary:
                wrong.append(f"{command}: {option}")
    assert wrong == []
