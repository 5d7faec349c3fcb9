"""bench/charts.py on a small fixture set of result files: a valid, deterministic PNG of the
expected size, and one clear line naming the file when an input is missing or malformed."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from bench import charts
from tests.conftest import repo_root

FIXTURES: dict[str, dict[str, object]] = {
    "dedup": {
        "ingress": {
            "msgs_per_s_median": {"passthrough": 500.0},
            "ratio_to_passthrough": {"memory": 0.99, "redis": 0.84, "firestore": 0.57},
            "targets": {"redis": 0.8, "firestore": 0.5},
        }
    },
    "delay": {
        "lateness": {
            "messages": 600,
            "lateness_ms": {"p50": 58.0, "p99": 135.0, "max": 151.0},
            "early": 0,
            "target": {"p99_ms": 250},
        }
    },
    "fifo_sequencer": {
        "publishers": 4,
        "runs": {
            "firestore_transaction": {"numbers_per_s": 0.5},
            "firestore_increment": {"numbers_per_s": 340.0},
            "firestore_block": {"numbers_per_s": 24887.0},
            "redis_incrby": {"numbers_per_s": 6634.0},
        },
    },
    "fifo": {
        "backend": "redis",
        "fifo_msgs_per_s_by_groups": {"1": 150.0, "4": 521.0, "16": 745.0, "64": 706.0},
        "unordered_msgs_per_s": 1332.0,
    },
    "e2e_mixed": {"published": 2000, "wall_s": 32.0, "published_msgs_per_s": 62.5},
    "soak": {
        "messages": 50000,
        "backend": "firestore",
        "wall_s": 800.0,
        "published_msgs_per_s": 62.5,
        "ledger": {
            "in": 50000,
            "delivered": 39900,
            "deduplicated": 10000,
            "dead_lettered": 100,
            "balanced": True,
            "dead_letter_reasons": {"fifo_poison": 12, "invalid_delay_seconds": 13},
            "fifo_groups_in_order": 20,
            "fifo_groups": 20,
        },
        "lateness_ms": {"messages": 10000, "p50": 80.0, "p99": 300.0, "max": 900.0, "early": 0},
    },
}


def write_fixtures(directory: Path, names: tuple[str, ...] = tuple(FIXTURES)) -> Path:
    for name in names:
        (directory / f"{name}.json").write_text(json.dumps(FIXTURES[name]))
    return directory


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the PNG signature and IHDR chunk (fails on anything else)."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature"
    assert head[12:16] == b"IHDR", "first chunk is not IHDR"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def test_writes_a_png_of_the_expected_size_and_the_same_bytes_twice(tmp_path: Path) -> None:
    results = write_fixtures(tmp_path)
    assert charts.main(["--results", str(results)]) == 0
    out = results / "benchmarks.png"
    expected = (int(charts.SIZE_INCHES[0] * charts.DPI), int(charts.SIZE_INCHES[1] * charts.DPI))
    assert png_size(out) == expected
    first = out.read_bytes()
    assert b"tIME" not in first  # no timestamp chunk
    charts.main(["--results", str(results)])
    assert out.read_bytes() == first


def test_soak_is_optional(tmp_path: Path) -> None:
    results = write_fixtures(tmp_path, tuple(n for n in FIXTURES if n != "soak"))
    out = tmp_path / "charts" / "b.png"
    assert charts.main(["--results", str(results), "--out", str(out)]) == 0
    assert png_size(out)[0] > 0


@pytest.mark.parametrize(
    ("name", "content", "problem"),
    [
        ("delay", None, "missing"),
        ("dedup", "{not json", "not valid JSON"),
        ("fifo", "[1, 2]", "JSON object"),
        ("fifo_sequencer", json.dumps({"publishers": 4, "runs": {}}), "runs.firestore_transaction"),
        ("soak", json.dumps({**FIXTURES["soak"], "wall_s": "slow"}), "not a number"),
    ],
)
def test_a_bad_input_is_one_clear_line_naming_the_file(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    content: str | None,
    problem: str,
) -> None:
    results = write_fixtures(tmp_path)
    path = results / f"{name}.json"
    if content is None:
        path.unlink()
    else:
        path.write_text(content)
    assert charts.main(["--results", str(results)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"charts: {path}: ")
    assert problem in err
    assert "Traceback" not in err
    assert not (results / "benchmarks.png").exists()


def test_runs_as_a_module(tmp_path: Path) -> None:
    """`python -m bench.charts` as make bench calls it: exit status and message, no traceback."""
    (tmp_path / "dedup.json").write_text("{")
    run = subprocess.run(
        [sys.executable, "-m", "bench.charts", "--results", str(tmp_path)],
        check=False,  # the exit status is what is under test
        cwd=repo_root(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert run.stderr.strip().startswith("charts: ")
    assert "Traceback" not in run.stderr
