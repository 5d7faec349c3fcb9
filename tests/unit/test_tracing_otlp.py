"""OTLP export and OpenTelemetry's own variables (``OTEL_*``) at an entry point's start.

Each case runs in a fresh interpreter (the global tracer provider is set once per process). The
OTLP receiver is a small HTTP server on 127.0.0.1 that records each ``POST /v1/traces`` body, as
a collector would receive it; span and resource names are plain strings in the protobuf body.
"""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator

import pytest

from pubsub_toolkit.tracing_setup import exporter_names
from pubsub_toolkit.tracing_setup import service_resource as resource_for
from tests.conftest import repo_root

ROOT = repo_root()
SPAN = """
from opentelemetry import trace
from pubsub_toolkit import tracing
from pubsub_toolkit.tracing_setup import configure_entry_point
assert configure_entry_point({"PUBSUB_TOOLKIT_TRACING": "on"}, service="ingress")
with tracing.sending("projects/p/topics/final", hop="producer"):
    pass
provider = trace.get_tracer_provider()
print(type(provider).__name__, provider.force_flush() if hasattr(provider, "force_flush") else "-")
"""
BLOCK_OTLP = """
import importlib.abc, sys
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.startswith("opentelemetry.exporter.otlp"):
            raise ModuleNotFoundError(name, name=name)
sys.meta_path.insert(0, Absent())
"""


class Receiver(http.server.BaseHTTPRequestHandler):
    """Records each POST's path and body; answers 200 with an empty OTLP response."""

    posts: list[tuple[str, bytes]]
    arrived: threading.Event

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.posts.append((self.path, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()
        self.arrived.set()

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the test reads the records."""


@pytest.fixture
def receiver() -> Iterator[tuple[str, type[Receiver]]]:
    handler = type("Recorder", (Receiver,), {"posts": [], "arrived": threading.Event()})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def python(body: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PUBSUB_TOOLKIT_TRACING", "PUBSUB_TOOLKIT_TRACE_FILE")
        and not k.startswith("OTEL_")
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


def test_an_otlp_endpoint_gets_the_spans_with_the_otel_service_name(
    receiver: tuple[str, type[Receiver]],
) -> None:
    url, handler = receiver
    run = python(
        SPAN,
        OTEL_EXPORTER_OTLP_ENDPOINT=url,
        OTEL_SERVICE_NAME="orders-ingress",
        GOOGLE_CLOUD_PROJECT="p",
    )
    assert run.returncode == 0, run.stderr
    assert handler.arrived.wait(30)
    [(path, body)] = handler.posts
    assert path == "/v1/traces"
    assert b"send final" in body
    assert b"orders-ingress" in body  # OTEL_SERVICE_NAME wins over the entry point's name


def test_without_otel_service_name_the_entry_points_name_is_the_service(
    receiver: tuple[str, type[Receiver]],
) -> None:
    url, handler = receiver
    run = python(SPAN, OTEL_TRACES_EXPORTER="otlp", OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=url)
    assert run.returncode == 0, run.stderr
    assert handler.arrived.wait(30)
    [(_, body)] = handler.posts
    assert b"ingress" in body and b"send final" in body


def test_otel_traces_exporter_none_and_a_sampler_of_zero_send_nothing(
    receiver: tuple[str, type[Receiver]],
) -> None:
    url, handler = receiver
    quiet = python(SPAN, OTEL_TRACES_EXPORTER="none", OTEL_EXPORTER_OTLP_ENDPOINT=url)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout.split() == ["ProxyTracerProvider", "-"]  # no exporter installed
    unsampled = python(
        SPAN + "print(trace.get_tracer_provider().sampler.get_description())",
        OTEL_EXPORTER_OTLP_ENDPOINT=url,
        OTEL_TRACES_SAMPLER="traceidratio",
        OTEL_TRACES_SAMPLER_ARG="0",
    )
    assert unsampled.returncode == 0, unsampled.stderr
    assert unsampled.stdout.splitlines() == ["TracerProvider True", "TraceIdRatioBased{0.0}"]
    assert handler.posts == []  # both runs flushed before exiting: nothing was sent


def test_a_bad_otel_traces_exporter_is_a_configuration_error_naming_it() -> None:
    run = python(SPAN, OTEL_TRACES_EXPORTER="zipkin")
    assert run.returncode != 0
    assert (
        "ConfigurationError: OTEL_TRACES_EXPORTER='zipkin': zipkin is not one of otlp, "
        "gcp_trace, console, none"
    ) in run.stderr


def test_the_cli_without_the_otlp_exporter_names_the_extra_in_one_line() -> None:
    run = python(
        BLOCK_OTLP
        + """
import sys
from pubsub_toolkit_cli.cli import main
sys.exit(main(["publish", "hello"]))
""",
        PUBSUB_TOOLKIT_TRACING="on",
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9",
        GOOGLE_CLOUD_PROJECT="p",
    )
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip().splitlines() == [
        "pubsub-toolkit: error: OTLP export needs opentelemetry.exporter.otlp.proto.http: "
        "pip install 'pubsub-toolkit[otlp]'"
    ]


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({}, ["gcp_trace"]),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, ["otlp"]),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, ["otlp"]),
        ({"OTEL_TRACES_EXPORTER": "otlp,console"}, ["otlp", "console"]),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, []),
    ],
)
def test_the_exporters_follow_the_otel_variables(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], names: list[str]
) -> None:
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)
    assert exporter_names(env) == names


def test_otel_service_name_wins_over_the_entry_points_name(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)
    assert resource_for("ingress").attributes["service.name"] == "ingress"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "orders-ingress")
    assert resource_for("ingress").attributes["service.name"] == "orders-ingress"
