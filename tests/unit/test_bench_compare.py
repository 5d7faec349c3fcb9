"""bench/compare's pure parts: per-round ratios, their medians, the run's verdict; and that the
measuring code reaches the library only through its table of public names (issue 26)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from bench import compare, compare_workloads

WORKLOADS = Path(compare_workloads.__file__)


def run(
    kind: str, round_no: int, variant: str, metrics: dict[str, float], **extra: Any
) -> dict[str, Any]:
    return {
        "kind": kind,
        "round": round_no,
        "variant": variant,
        "metrics": metrics,
        "derived": extra.pop("derived", {}),
        "phases": extra.pop("phases", {}),
        **extra,
    }


def rounds(name: str, pairs: list[tuple[float, float]], kind: str = "fifo") -> list[dict[str, Any]]:
    """One metric over several rounds: (baseline, current) per round."""
    runs = []
    for n, (base, cur) in enumerate(pairs):
        runs += [run(kind, n, "baseline", {name: base}), run(kind, n, "current", {name: cur})]
    return runs


def test_the_ratio_is_the_median_of_per_round_ratios_not_the_ratio_of_medians() -> None:
    # Round ratios 1.0, 0.5, 1.0 -> median 1.0; the medians' ratio would be 100/100 = 1.0 too,
    # so make them differ: baselines 100, 200, 300 against currents 100, 100, 300.
    runs = rounds("fifo.msgs_per_s.groups_1", [(100, 100), (200, 100), (300, 300)])
    entry = compare.summarise(runs)["metrics"]["fifo.msgs_per_s.groups_1"]
    assert entry["ratios"] == [1.0, 0.5, 1.0]
    assert entry["ratio_median"] == 1.0
    assert entry["baseline_median"] == 200 and entry["current_median"] == 100  # 0.5 as medians
    assert (entry["ratio_min"], entry["ratio_max"]) == (0.5, 1.0)


def test_the_verdict_is_the_minimum_median_ratio_over_all_metrics() -> None:
    runs = rounds("fifo.a", [(100, 99), (100, 101), (100, 98)]) + rounds(
        "dedup.b", [(10, 9.6), (10, 9.4), (10, 9.7)], kind="dedup"
    )
    verdict = compare.summarise(runs)["verdict"]
    assert verdict["worst_metric"] == "dedup.b"
    assert verdict["worst_ratio"] == 0.96
    assert verdict["worst_ratio_ok"] is True
    assert verdict["below_threshold"] == []


def test_a_median_ratio_below_0_95_fails_the_run() -> None:
    runs = rounds("fifo.a", [(100, 94), (100, 96), (100, 90)])
    verdict = compare.summarise(runs)["verdict"]
    assert verdict["worst_ratio"] == 0.94
    assert verdict["worst_ratio_ok"] is False
    assert verdict["below_threshold"] == ["fifo.a"]


def test_exactly_the_threshold_passes() -> None:
    summaries = {"m": {"ratio_median": 0.95}}
    assert compare.verdict(summaries, {"m"}, errors=0)["worst_ratio_ok"] is True


def test_a_failed_worker_or_a_metric_without_a_pair_fails_the_run() -> None:
    good = rounds("fifo.a", [(100, 100)] * 3)
    failed = [*good, {"kind": "dedup", "round": 0, "variant": "current", "error": "exit code 1"}]
    assert compare.summarise(failed)["verdict"]["worst_ratio_ok"] is False
    assert compare.summarise(failed)["verdict"]["failed_workers"] == 1
    # dedup.b measured for the baseline only (the current worker lacks it): missing, not ok
    lone = [*good, run("dedup", 0, "baseline", {"dedup.b": 5.0}), run("dedup", 0, "current", {})]
    verdict = compare.summarise(lone)["verdict"]
    assert verdict["missing_metrics"] == ["dedup.b"]
    assert verdict["worst_ratio_ok"] is False


def test_no_metric_at_all_is_not_ok() -> None:
    verdict = compare.summarise([])["verdict"]
    assert verdict["worst_ratio"] is None and verdict["worst_ratio_ok"] is False


def test_warm_up_runs_and_incomplete_pairs_are_not_counted() -> None:
    runs = [
        *rounds("fifo.a", [(100, 100)]),
        run("fifo", 0, "baseline", {"fifo.a": 100}, warmup=True),
        run("fifo", 0, "current", {"fifo.a": 10}, warmup=True),
        run("fifo", 1, "baseline", {"fifo.a": 100}),  # its current never finished
    ]
    entry = compare.summarise(runs)["metrics"]["fifo.a"]
    assert entry["ratios"] == [1.0]


def test_derived_ratios_are_reported_but_not_gated() -> None:
    runs = []
    for n in range(3):
        runs += [
            run("fifo", n, "baseline", {"fifo.a": 100}, derived={"fifo.speedup": 4.0}),
            run("fifo", n, "current", {"fifo.a": 100}, derived={"fifo.speedup": 3.0}),
        ]
    summary = compare.summarise(runs)
    assert summary["derived"]["fifo.speedup"]["ratio_median"] == 0.75
    assert summary["verdict"]["worst_ratio_ok"] is True


def test_noise_aware_verdict_needs_every_round_below_1() -> None:
    assert compare.summarise(rounds("m", [(100, 90), (100, 80), (100, 101)]))["metrics"]["m"][
        "verdict"
    ] == ("within noise")
    assert compare.summarise(rounds("m", [(100, 90), (100, 80), (100, 99)]))["metrics"]["m"][
        "verdict"
    ] == ("worse")


def test_store_counts_compare_the_medians_per_item() -> None:
    phases = {"fifo.a": {"items": 10, "counts": {"redis_commands": 4.0, "redis_setup.PING": 1}}}
    fewer = {"fifo.a": {"items": 10, "counts": {"redis_commands": 3.0}}}
    runs = []
    for n in range(3):
        runs += [
            run("fifo", n, "baseline", {"fifo.a": 1.0}, phases=phases),
            run("fifo", n, "current", {"fifo.a": 1.0}, phases=fewer),
        ]
    counts = compare.summarise(runs)["counts_per_item"]["fifo.a"]
    assert counts["redis_commands"]["current_minus_baseline"] == -1.0
    assert "redis_setup.PING" not in counts  # connection set-up depends on thread timing


def test_the_worker_imports_the_library_only_through_its_table() -> None:
    """Every ``pubsub_toolkit`` import in compare_workloads is the bare package (to check where
    it came from); every other library name goes through LIBRARY, which the report lists."""
    tree = ast.parse(WORKLOADS.read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pubsub_toolkit"):
            imported.add(f"from {node.module}")
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names if a.name.startswith("pubsub_toolkit")}
    assert imported == {"pubsub_toolkit"}
    assert all(target.startswith("pubsub_toolkit") for target in compare_workloads.LIBRARY.values())


def test_every_library_name_resolves_in_this_tree() -> None:
    names = compare_workloads.resolve_library()
    assert set(names) == set(compare_workloads.LIBRARY)


def test_a_missing_library_name_stops_the_worker_with_its_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(compare_workloads.LIBRARY, "Gone", "pubsub_toolkit:NoSuchName")
    with pytest.raises(SystemExit, match=r"pubsub_toolkit\.NoSuchName"):
        compare_workloads.resolve_library()


def test_the_kinds_agree_between_driver_and_worker() -> None:
    assert compare.KINDS == compare_workloads.KINDS


def test_consumer_phases_double_from_16_groups() -> None:
    assert [compare_workloads.consumer_messages(100, g) for g in (1, 4, 16, 64)] == [
        100,
        100,
        200,
        200,
    ]


def test_derived_ratios_come_from_one_variants_metrics() -> None:
    metrics = {
        "dedup.ingress_msgs_per_s.redis": 400.0,
        "fifo.msgs_per_s.groups_1": 100.0,
        "fifo.msgs_per_s.groups_16": 500.0,
        "fifo.msgs_per_s.unordered_16": 1000.0,
        "async_consumer.msgs_per_s.async.groups_64": 300.0,
        "async_consumer.msgs_per_s.threaded.groups_64": 200.0,
    }
    derived = compare.derive(metrics, {"dedup.ingress_msgs_per_s.passthrough": 500.0})
    assert derived == {
        "dedup.ingress_msgs_per_s.passthrough": 500.0,
        "dedup.ingress_ratio_to_passthrough.redis": 0.8,
        "fifo.speedup_16_vs_1_group": 5.0,
        "fifo.fifo_16_groups_vs_unordered": 0.5,
        "async_consumer.async_over_threaded.groups_64": 1.5,
    }


def test_every_phase_is_a_metric_of_its_kind_and_the_pass_through_is_not_gated() -> None:
    names = {
        kind: compare_workloads.phases(kind, [1, 4, 16, 64]) for kind in compare_workloads.KINDS
    }
    assert all(n.startswith(f"{kind}.") for kind, ns in names.items() for n in ns)
    assert len(names["dedup"]) == 10 and len(names["fifo"]) == 5
    assert len(names["async_consumer"]) == 6
    assert set(names["dedup"]) >= compare_workloads.REFERENCE
