"""The entry points' tracing set-up: PUBSUB_TOOLKIT_TRACING checked, spans exported once, Cloud
Trace or a warning.

Each case that turns tracing on runs in a fresh interpreter: OpenTelemetry's global tracer
provider can be set only once per process, and the test session's own must stay untouched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pubsub_toolkit.tracing_setup import NO_EXPORTER_WARNING
from tests.conftest import repo_root

ROOT = repo_root()
# Makes the Cloud Trace exporter unimportable, as without the [tracing] extra.
NO_CLOUD_TRACE = """
import importlib.abc, sys
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.startswith("opentelemetry.exporter.cloud_trace"):
            raise ModuleNotFoundError(name, name=name)
sys.meta_path.insert(0, Absent())
"""
# A stand-in for opentelemetry-exporter-gcp-trace that records what it was given.
FAKE_CLOUD_TRACE = """
import sys, types
from opentelemetry.sdk.trace.export import SpanExportResult
module = types.ModuleType("opentelemetry.exporter.cloud_trace")
class CloudTraceSpanExporter:
    made = []
    def __init__(self, project_id=None):
        self.project_id, self.spans = project_id, []
        CloudTraceSpanExporter.made.append(self)
    def export(self, spans):
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS
    def shutdown(self):
        pass
    def force_flush(self, timeout_millis=30000):
        return True
module.CloudTraceSpanExporter = CloudTraceSpanExporter
sys.modules[module.__name__] = module
"""


def python(body: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PUBSUB_TOOLKIT_TRACING", "PUBSUB_TOOLKIT_TRACE_FILE")
    }
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(body)],
        env={**clean, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_bad_tracing_value_is_a_configuration_error_naming_the_variable() -> None:
    run = python(
        """
        from pubsub_toolkit.errors import ConfigurationError
        from pubsub_toolkit.tracing_setup import configure_entry_point
        for _ in range(2):  # refused every time: a refusal is not remembered as an answer
            try:
                configure_entry_point({"PUBSUB_TOOLKIT_TRACING": "maybe"}, service="ingress")
            except ConfigurationError as exc:
                print(exc)
        """
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["PUBSUB_TOOLKIT_TRACING must be on or off, not 'maybe'"] * 2


@pytest.mark.parametrize(
    ("folder", "call"),
    [
        ("functions/ingress", "main._get_ingress()"),
        ("functions/consumer", "main._get_processor()"),
        ("appengine/relay", "main.create_app()"),
    ],
)
def test_each_entry_point_refuses_a_bad_tracing_value_at_start(folder: str, call: str) -> None:
    run = python(
        f"""
        import sys
        sys.path.insert(0, {str(ROOT / folder)!r})
        import main
        {call}
        """,
        PUBSUB_TOOLKIT_TRACING="sometimes",
        PUBSUB_TOOLKIT_HANDLER="example_handler:handle",
    )
    assert run.returncode != 0
    last = run.stderr.strip().splitlines()[-1]
    assert last == (
        "pubsub_toolkit.errors.ConfigurationError: PUBSUB_TOOLKIT_TRACING must be on or off, not "
        "'sometimes'"
    ), run.stderr


def test_on_without_an_exporter_warns_once_and_still_traces() -> None:
    run = python(
        NO_CLOUD_TRACE
        + """
from pubsub_toolkit import tracing
from pubsub_toolkit.observability import configure_logging
from pubsub_toolkit.tracing_setup import configure_entry_point
configure_logging()
env = {"PUBSUB_TOOLKIT_TRACING": "on", "GOOGLE_CLOUD_PROJECT": "p"}
print(configure_entry_point(env, service="relay"), configure_entry_point(env, service="relay"))
print(tracing.enabled())
""",
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    warnings = [json.loads(x) for x in lines if x.startswith("{")]
    assert [w["severity"] for w in warnings] == ["WARNING"]
    assert warnings[0]["message"] == NO_EXPORTER_WARNING
    assert lines[-2:] == ["True True", "True"]


def test_on_with_the_cloud_trace_exporter_exports_in_batches_with_the_service_name() -> None:
    run = python(
        FAKE_CLOUD_TRACE
        + """
from opentelemetry import trace
from pubsub_toolkit import tracing
from pubsub_toolkit.tracing_setup import configure_entry_point
env = {"PUBSUB_TOOLKIT_TRACING": "on", "GOOGLE_CLOUD_PROJECT": "my-project"}
assert configure_entry_point(env, service="ingress")
assert configure_entry_point(env, service="ingress")  # once per process: no second exporter
with tracing.sending("projects/p/topics/final", hop="producer"):
    pass
provider = trace.get_tracer_provider()
provider.force_flush()
made = CloudTraceSpanExporter.made
print(len(made), made[0].project_id, [s.name for s in made[0].spans])
print(provider.resource.attributes["service.name"])
print(type(provider._active_span_processor._span_processors[0]).__name__)
""",
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "1 my-project ['send final']",
        "ingress",
        "BatchSpanProcessor",
    ]


def test_with_trace_file_every_span_goes_to_the_file_once(tmp_path: Path) -> None:
    path = tmp_path / "traces.jsonl"
    run = python(
        FAKE_CLOUD_TRACE
        + """
import os
from pubsub_toolkit import tracing
from pubsub_toolkit.tracing_setup import configure_entry_point
env = {"PUBSUB_TOOLKIT_TRACING": "on", "PUBSUB_TOOLKIT_TRACE_FILE": os.environ["OUT"]}
configure_entry_point(env, service="consumer")
configure_entry_point(env, service="consumer")
with tracing.sending("projects/p/topics/final", hop="consumer"):
    pass
print(len(CloudTraceSpanExporter.made))
""",
        OUT=str(path),
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["0"]  # the file, not Cloud Trace
    spans = [json.loads(line) for line in path.read_text().splitlines()]
    assert [s["name"] for s in spans] == ["send final"]
    assert spans[0]["attributes"]["pubsub_toolkit.hop"] == "consumer"


def test_head_sampling_is_one_setting_of_the_sdk_and_an_unsampled_message_records_nothing() -> None:
    """``OTEL_TRACES_SAMPLER``/``_ARG`` (read by the SDK's provider the entry point makes) sample
    at the head; a message whose producer's trace was not sampled is not recorded at ingress,
    and what ingress forwards still carries the trace on (sampled flag 0)."""
    run = python(
        FAKE_CLOUD_TRACE
        + """
from datetime import timedelta
from opentelemetry import trace
from pubsub_toolkit import tracing
from pubsub_toolkit.ingress.pipeline import Ingress
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from pubsub_toolkit.tracing_setup import configure_entry_point
from tests.support.sinks import RecordingSink
assert configure_entry_point({"PUBSUB_TOOLKIT_TRACING": "on"}, service="ingress")
provider = trace.get_tracer_provider()
print(provider.sampler.get_description())
sink = RecordingSink()
ingress = Ingress(store=MemoryDedupStore(), sink=sink, final_topic="projects/p/topics/final",
                  dead_letter_topic="projects/p/topics/dlq", lease=timedelta(seconds=30),
                  ttl=timedelta(hours=1))
unsampled = "00-" + "a" * 32 + "-" + "b" * 16 + "-00"
ingress.handle(Message(b"x", {"dedup_key": "k", tracing.TRACEPARENT: unsampled}, "1"))
provider.force_flush()
[forwarded] = sink.on("projects/p/topics/final")
carried = forwarded.attributes[tracing.TRACEPARENT].split("-")
print(len(CloudTraceSpanExporter.made[0].spans), carried[1] == "a" * 32, carried[3])
""",
        OTEL_TRACES_SAMPLER="parentbased_traceidratio",
        OTEL_TRACES_SAMPLER_ARG="0.1",
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "ParentBased{root:TraceIdRatioBased{0.1},remoteParentSampled:AlwaysOnSampler,"
        "remoteParentNotSampled:AlwaysOffSampler,localParentSampled:AlwaysOnSampler,"
        "localParentNotSampled:AlwaysOffSampler}",
        "0 True 00",
    ]
