"""The CLI's ``--help`` pages as Markdown, for docs/reference/cli-help.md.

    python -m tests.docs.cli_help > docs/reference/cli-help.md

Walks every command and action the parsers list (``pubsub-toolkit``, then each COMMAND, then
each ACTION), at a fixed terminal width so the page is the same on every machine;
tests/docs/test_cli_help.py fails when the page and the parsers disagree.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

WIDTH = "100"
_SUBCOMMAND = re.compile(r"^    ([a-z][\w-]*)(?:\s|$)")


def help_text(path: list[str]) -> str:
    env = {**os.environ, "COLUMNS": WIDTH}
    result = subprocess.run(
        [sys.executable, "-m", "pubsub_toolkit_cli.cli", *path, "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    return result.stdout.replace("__main__.py", "pubsub-toolkit")


def subcommands(text: str) -> list[str]:
    """The names listed under the COMMAND / ACTION heading of a help page."""
    names, listing = [], False
    for line in text.splitlines():
        if line.strip() in ("COMMAND", "ACTION"):
            listing = True
            continue
        if listing and line and not line.startswith(" "):
            break
        match = _SUBCOMMAND.match(line) if listing else None
        if match:
            names.append(match.group(1))
    return names


def pages() -> list[tuple[list[str], str]]:
    found, todo = [], [[]]
    while todo:  # bounded: the parsers' tree is finite and each path is visited once
        path = todo.pop(0)
        text = help_text(path)
        found.append((path, text))
        todo.extend([*path, name] for name in subcommands(text))
    return found


def markdown() -> str:
    out = [
        "# CLI --help",
        "",
        "Every command's `--help`, generated from the parsers "
        "(`python -m tests.docs.cli_help > docs/reference/cli-help.md`; the suite fails when "
        "this page and the parsers disagree).",
        "",
    ]
    for path, text in pages():
        command = " ".join(["pubsub-toolkit", *path])
        out += [f"## `{command}`", "", "```text", text.rstrip(), "```", ""]
    return "\n".join(out)


if __name__ == "__main__":
    sys.stdout.write(markdown())
