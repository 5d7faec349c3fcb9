"""A smoke run of ``bench/async_consumer.py`` (tiny sizes, a real redis-server): both variants
consume every message at every group count and the JSON is written where ``--output`` says,
not over the recorded figures in bench/results."""

from __future__ import annotations

import json
from pathlib import Path

from bench import async_consumer
from bench.common import RESULTS


def test_bench_async_consumer_smoke(redis_url: str, tmp_path: Path) -> None:
    recorded = (RESULTS / "async_consumer.json").read_text()
    async_consumer.main(
        ["--messages", "24", "--rounds", "1", "--redis-url", redis_url, "--output", str(tmp_path)]
    )
    document = json.loads((tmp_path / "async_consumer.json").read_text())
    assert document["workload"]["messages"] == 24
    assert set(document["results"]) == {"1", "16", "64"}
    for figures in document["results"].values():
        assert figures["async_over_threaded"] > 0
        assert figures["redis_commands_per_message"]["async"] > 0
    assert (RESULTS / "async_consumer.json").read_text() == recorded  # untouched
