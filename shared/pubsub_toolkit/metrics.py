"""The toolkit's metrics as OpenTelemetry instruments, with Cloud Monitoring as an exporter.

:func:`instrument` registers, on a ``MeterProvider``, instruments that read a
:class:`~pubsub_toolkit.observability.Metrics` (the counters every decision already bumps) and,
optionally, a FIFO store's listing:

=====================================  ==============  ==========================================
instrument                             kind            attributes / source
=====================================  ==============  ==========================================
``pubsub_toolkit.decisions``           counter         ``outcome``: every decision counted
``pubsub_toolkit.duplicates``          counter         deliveries dropped as duplicates
``pubsub_toolkit.mismatches``          counter         dedup key reused with other content
``pubsub_toolkit.dead_letters``        counter         ``reason`` (``dead_lettered.{reason}``)
``pubsub_toolkit.fifo.parked``         gauge           ``consumer``: parked messages, all groups
``pubsub_toolkit.fifo.oldest_gap_age`` gauge (s)       ``consumer``: the oldest gap's age
``pubsub_toolkit.fifo.groups_waiting`` gauge           ``consumer``: groups with parked work
``pubsub_toolkit.delay.lateness``      histogram (s)   each release's lateness (the relay)
``pubsub_toolkit.handler.duration``    histogram (s)   each handler call
=====================================  ==============  ==========================================

Every instrument carries the ``component`` attribute given to :func:`instrument` (ingress,
relay, consumer). Counters and gauges are observable: the SDK calls back at each collection
(every ``PUBSUB_TOOLKIT_METRICS_EXPORT_SECONDS``), so the message path pays nothing for them;
the gauges list the FIFO store's groups then
(:func:`~pubsub_toolkit.stores.fifo_state.status.group_statuses`, what ``pubsub-toolkit
status`` shows). The two histograms are synchronous OTel histograms with the toolkit's bucket
bounds, fed by :meth:`Metrics.observe` through an observer: one ``record()`` per observation
while export is on, nothing when it is off.

Entry points call :func:`configure_metrics_from_env`: ``PUBSUB_TOOLKIT_METRICS_EXPORTER`` is
``off`` (the default), ``cloud-monitoring`` (the ``[metrics]`` extra:
``opentelemetry-exporter-gcp-monitoring``; metrics land as
``workload.googleapis.com/pubsub_toolkit.*``) or ``console`` (stdout, for local runs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pubsub_toolkit._extras import import_optional
from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.errors import ConfigurationError
from pubsub_toolkit.observability import BUCKETS, DEAD_LETTERED, HANDLER_DURATION, LATENESS, Metrics

if TYPE_CHECKING:
    from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation

    from pubsub_toolkit.stores.fifo_state.base import FifoStore

METER_NAME = "pubsub_toolkit"
PREFIX = "pubsub_toolkit."
EXPORTER_ENV = "PUBSUB_TOOLKIT_METRICS_EXPORTER"
INTERVAL_ENV = "PUBSUB_TOOLKIT_METRICS_EXPORT_SECONDS"
DEFAULT_INTERVAL_S = 60.0  # Cloud Monitoring accepts one point per series every 5 s at most
EXPORTERS = ("off", "cloud-monitoring", "console")
_HISTOGRAMS = {
    LATENESS: ("delay.lateness", "How late a delayed message was released"),
    HANDLER_DURATION: ("handler.duration", "How long a handler call took"),
}


@dataclass(frozen=True)
class FifoSource:
    """Where the FIFO gauges come from: ``store``'s listed groups of ``consumer``."""

    store: FifoStore
    consumer: str
    clock: Clock = SYSTEM_CLOCK


def instrument(
    metrics: Metrics,
    provider: MeterProvider | None = None,
    *,
    component: str,
    fifo: FifoSource | None = None,
) -> None:
    """Export ``metrics`` (and ``fifo``'s gauges) through ``provider`` (default: the global
    one) with the attribute ``component=...``."""
    from opentelemetry import metrics as otel_metrics

    meter = (provider or otel_metrics.get_meter_provider()).get_meter(METER_NAME)
    base = {"component": component}

    def counters(pick: Callable[[str], dict[str, str] | None]) -> Callable[..., Iterable[Any]]:
        """A callback observing each counter ``pick`` gives attributes for (None: not this)."""

        def observe(options: CallbackOptions) -> Iterable[Observation]:
            out = []
            for name, value in metrics.snapshot().items():
                extra = pick(name)
                if extra is not None:
                    out.append(otel_metrics.Observation(value, {**base, **extra}))
            return out

        return observe

    meter.create_observable_counter(
        f"{PREFIX}decisions",
        [counters(lambda n: None if "." in n else {"outcome": n})],
        description="Decisions by outcome (processed, duplicate, parked, dead_lettered, ...)",
    )
    meter.create_observable_counter(
        f"{PREFIX}duplicates",
        [counters(lambda n: {} if n == "duplicate" else None)],
        description="Deliveries dropped as duplicates",
    )
    meter.create_observable_counter(
        f"{PREFIX}mismatches",
        [counters(lambda n: {} if n == "mismatch" else None)],
        description="Dedup keys reused with different content",
    )
    marker = f"{DEAD_LETTERED}."
    meter.create_observable_counter(
        f"{PREFIX}dead_letters",
        [counters(lambda n: {"reason": n[len(marker) :]} if n.startswith(marker) else None)],
        description="Messages dead-lettered, by reason",
    )
    if fifo is not None:
        _fifo_gauges(meter, fifo, base)
    _histograms(meter, metrics, base)


def _fifo_gauges(meter: Meter, fifo: FifoSource, base: Mapping[str, str]) -> None:
    from opentelemetry.metrics import Observation

    from pubsub_toolkit.stores.fifo_state.status import group_statuses

    attributes = {**base, "consumer": fifo.consumer}

    def rows() -> list[Any]:
        return group_statuses(fifo.store, fifo.consumer, now=fifo.clock.now())

    def parked(options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(sum(r.parked for r in rows()), attributes)]

    def waiting(options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(sum(1 for r in rows() if r.parked), attributes)]

    def gap_age(options: CallbackOptions) -> Iterable[Observation]:
        ages = [r.oldest_gap_age_s for r in rows() if r.oldest_gap_age_s is not None]
        return [Observation(max(ages, default=0.0), attributes)]

    meter.create_observable_gauge(
        f"{PREFIX}fifo.parked", [parked], description="Messages parked behind a gap"
    )
    meter.create_observable_gauge(
        f"{PREFIX}fifo.groups_waiting", [waiting], description="FIFO groups with parked messages"
    )
    meter.create_observable_gauge(
        f"{PREFIX}fifo.oldest_gap_age",
        [gap_age],
        unit="s",
        description="How long the oldest missing number has been missing (0: no gap)",
    )


def _histograms(meter: Meter, metrics: Metrics, base: Mapping[str, str]) -> None:
    instruments = {
        name: meter.create_histogram(
            f"{PREFIX}{suffix}",
            unit="s",
            description=description,
            explicit_bucket_boundaries_advisory=list(BUCKETS),
        )
        for name, (suffix, description) in _HISTOGRAMS.items()
    }
    attributes = dict(base)

    def record(name: str, value: float) -> None:
        histogram = instruments.get(name)
        if histogram is not None:
            histogram.record(value, attributes)

    metrics.add_observer(record)


def configure_metrics_from_env(
    env: Mapping[str, str],
    metrics: Metrics,
    *,
    component: str,
    fifo: FifoSource | None = None,
) -> Any | None:
    """For entry points: start exporting ``metrics`` as ``PUBSUB_TOOLKIT_METRICS_EXPORTER`` says
    (see the module docstring), every ``PUBSUB_TOOLKIT_METRICS_EXPORT_SECONDS`` (default 60).
    Returns the SDK's ``MeterProvider`` (call ``shutdown()`` at exit to flush), or None when
    export is off."""
    raw = env.get(EXPORTER_ENV, "").strip().lower() or "off"
    if raw not in EXPORTERS:
        raise ConfigurationError(f"{EXPORTER_ENV} {raw!r} is not one of {', '.join(EXPORTERS)}")
    if raw == "off":
        return None
    interval = _interval(env.get(INTERVAL_ENV, ""))
    import_optional("opentelemetry.sdk.metrics", extra="metrics", needed_by=EXPORTER_ENV)
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import (
        ConsoleMetricExporter,
        PeriodicExportingMetricReader,
    )

    exporter: Any
    if raw == "cloud-monitoring":
        module = import_optional(
            "opentelemetry.exporter.cloud_monitoring",
            extra="metrics",
            needed_by=f"{EXPORTER_ENV}=cloud-monitoring",
        )
        project = env.get("GOOGLE_CLOUD_PROJECT", "").strip() or None
        # Several instances write the same series: a unique label keeps their points apart.
        exporter = module.CloudMonitoringMetricsExporter(
            project_id=project, add_unique_identifier=True
        )
    else:
        exporter = ConsoleMetricExporter()
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=interval * 1000)
    provider = MeterProvider(metric_readers=[reader])
    instrument(metrics, provider, component=component, fifo=fifo)
    return provider


def _interval(raw: str) -> float:
    if not raw.strip():
        return DEFAULT_INTERVAL_S
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if value < 5:
        raise ConfigurationError(f"{INTERVAL_ENV} {raw!r} must be a number of seconds >= 5")
    return value
