"""The toolkit's metrics through the OpenTelemetry SDK (InMemoryMetricReader): counters from
decisions, dead letters by reason, FIFO gauges from the store's listing, the two histograms with
the toolkit's buckets, and the environment switch entry points use."""

from __future__ import annotations

import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.errors import ConfigurationError, MissingDependencyError
from pubsub_toolkit.metrics import FifoSource, configure_metrics_from_env, instrument
from pubsub_toolkit.observability import BUCKETS, HANDLER_DURATION, LATENESS, DecisionLog, Metrics
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore

START = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def collected(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    """Metric name -> its data points, from one collection."""
    data = reader.get_metrics_data()
    assert data is not None
    return {
        metric.name: list(metric.data.data_points)
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }


def by(points: list[Any], key: str) -> dict[str, Any]:
    return {str(p.attributes.get(key)): p.value for p in points}


def test_counters_gauges_and_histograms_reach_the_reader() -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    metrics, clock, store = Metrics(), ManualClock(START), MemoryFifoStore()
    instrument(metrics, provider, component="consumer", fifo=FifoSource(store, "billing", clock))
    log = DecisionLog("billing", metrics)
    for _ in range(3):
        log.decision("duplicate", "dup", dedup_key="k")
    log.decision("mismatch", "ALERT", dedup_key="k")
    log.decision("dead_lettered", "dl", dedup_key="a", reason="invalid_delay_seconds")
    log.decision("dead_lettered", "dl", dedup_key="b", reason="invalid_delay_seconds")
    log.decision("dead_lettered", "dl", dedup_key="c", reason="poison")
    log.decision("processed", "ok", dedup_key="d")
    for group, parked, gap_at in (
        ("g1", (3, 4), START),
        ("g2", (7,), START + timedelta(seconds=30)),
    ):
        state = store.load("billing", group)
        assert store.save("billing", group, replace(state, parked=parked, gap_since=gap_at), state)
    clock.advance(timedelta(seconds=90))
    metrics.observe(LATENESS, 0.02)
    metrics.observe(LATENESS, 4.0)
    metrics.observe(HANDLER_DURATION, 0.003)

    points = collected(reader)
    assert points["pubsub_toolkit.duplicates"][0].value == 3
    assert points["pubsub_toolkit.mismatches"][0].value == 1
    assert by(points["pubsub_toolkit.dead_letters"], "reason") == {
        "invalid_delay_seconds": 2,
        "poison": 1,
    }
    assert by(points["pubsub_toolkit.decisions"], "outcome") == {
        "duplicate": 3,
        "mismatch": 1,
        "dead_lettered": 3,
        "processed": 1,
    }
    assert points["pubsub_toolkit.fifo.parked"][0].value == 3
    assert points["pubsub_toolkit.fifo.groups_waiting"][0].value == 2
    assert points["pubsub_toolkit.fifo.oldest_gap_age"][0].value == 90.0
    assert points["pubsub_toolkit.fifo.parked"][0].attributes == {
        "component": "consumer",
        "consumer": "billing",
    }
    lateness = points["pubsub_toolkit.delay.lateness"][0]
    assert lateness.count == 2 and lateness.sum == pytest.approx(4.02)
    assert tuple(lateness.explicit_bounds) == BUCKETS  # the toolkit's buckets, not the SDK's
    assert lateness.bucket_counts[BUCKETS.index(0.05)] == 1
    assert lateness.bucket_counts[BUCKETS.index(5.0)] == 1
    assert points["pubsub_toolkit.handler.duration"][0].count == 1
    assert all(p.attributes["component"] == "consumer" for pts in points.values() for p in pts)

    # Counters are cumulative: the next collection sees the growth.
    log.decision("duplicate", "dup", dedup_key="k")
    assert collected(reader)["pubsub_toolkit.duplicates"][0].value == 4
    provider.shutdown()


def test_nothing_is_recorded_on_the_message_path_without_export() -> None:
    metrics = Metrics()
    metrics.observe(LATENESS, 1.0)  # no observer: only the in-process histogram
    assert metrics.histograms()[LATENESS].count == 1
    assert configure_metrics_from_env({}, metrics, component="ingress") is None
    assert (
        configure_metrics_from_env(
            {"PUBSUB_TOOLKIT_METRICS_EXPORTER": "off"}, metrics, component="x"
        )
        is None
    )


def test_the_environment_switch_checks_its_values() -> None:
    metrics = Metrics()
    with pytest.raises(ConfigurationError, match="PUBSUB_TOOLKIT_METRICS_EXPORTER 'prometheus'"):
        configure_metrics_from_env(
            {"PUBSUB_TOOLKIT_METRICS_EXPORTER": "prometheus"}, metrics, component="x"
        )
    with pytest.raises(ConfigurationError, match="PUBSUB_TOOLKIT_METRICS_EXPORT_SECONDS"):
        configure_metrics_from_env(
            {
                "PUBSUB_TOOLKIT_METRICS_EXPORTER": "console",
                "PUBSUB_TOOLKIT_METRICS_EXPORT_SECONDS": "1",
            },
            metrics,
            component="x",
        )
    provider = configure_metrics_from_env(
        {
            "PUBSUB_TOOLKIT_METRICS_EXPORTER": "console",
            "PUBSUB_TOOLKIT_METRICS_EXPORT_SECONDS": "3600",
        },
        metrics,
        component="relay",
    )
    assert isinstance(provider, MeterProvider)
    provider.shutdown()


def test_cloud_monitoring_names_the_extra_when_the_exporter_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As if the [metrics] extra were not installed (a None entry makes the import fail).
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.cloud_monitoring", None)
    with pytest.raises(MissingDependencyError, match=r"pubsub-toolkit\[metrics\]"):
        configure_metrics_from_env(
            {"PUBSUB_TOOLKIT_METRICS_EXPORTER": "cloud-monitoring"}, Metrics(), component="x"
        )
