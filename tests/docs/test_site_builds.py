"""The documentation site builds with ``mkdocs build --strict``: a broken link, anchor or API
name in docs/ (or a public name that lost its docstring target) fails the suite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_docs_site_builds_strict(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text()
    # The API page documents the public surface, not only the package docstring.
    for name in ("Publisher", "Consumer", "IdempotentProcessor", "FifoGate"):
        assert name in api, f"{name} missing from the API reference"
