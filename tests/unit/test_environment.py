"""One settings namespace (issue 27, item 3): every variable the toolkit reads is PUBSUB_TOOLKIT_*
(Google's and OpenTelemetry's keep their names), an unknown PUBSUB_TOOLKIT_* name stops the start
with the closest known one, a former bare name only warns, and booleans take exactly their two
documented values.

The source scans read the toolkit's code (the library, the functions, the relay, the CLI, the
local stack) and its deploy files, so a variable added later with a bare name, or one missing from
the table, fails here rather than in a user's environment.
"""

from __future__ import annotations

import ast
import functools
import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from pubsub_toolkit import ConsumerSettings, Settings, environment
from pubsub_toolkit.environment import FORMER_NAMES, PREFIX, VARIABLES, check_environment, flag
from pubsub_toolkit.errors import ConfigurationError

ROOT = Path(__file__).resolve().parents[2]
SOURCES = (
    "shared/pubsub_toolkit",
    "functions/ingress",
    "functions/consumer",
    "appengine/relay",
    "cli/pubsub_toolkit_cli",
    "local/pubsub_toolkit_local",
)
# Not the toolkit's to rename: Google's (the project, credentials, the emulator hosts - the
# Cloud Tasks one named like them), the Cloud SDK's, the metadata server's, OpenTelemetry's, and
# the process's own.
FOREIGN = re.compile(
    r"GOOGLE_[A-Z_]+|[A-Z_]+_EMULATOR_HOST|CLOUDSDK_[A-Z_]+|GCE_METADATA_[A-Z_]+|OTEL_[A-Z_]+"
    r"|PATH|HOME|PYTHONPATH|TMPDIR"
)
ENV_NAME = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|PATH|HOME")
BASE = {"GOOGLE_CLOUD_PROJECT": "p", PREFIX + "FINAL_TOPIC": "f", PREFIX + "DEAD_LETTER_TOPIC": "d"}


@functools.cache
def parsed() -> list[tuple[Path, ast.Module]]:
    """Each source file of the toolkit with its syntax tree (parsed once for every test)."""
    return [
        (path, ast.parse(path.read_text(encoding="utf-8")))
        for folder in SOURCES
        for path in sorted((ROOT / folder).rglob("*.py"))
    ]


def _is_environment(node: ast.expr) -> bool:
    """``os.environ``, ``env``, ``self.env``, ``state.env``, ``environ``: what is read from."""
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
    return name.endswith(("environ", "env")) or name == "os"


def environment_reads(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """(line, name) of each ``E.get(N)``, ``E[N]``, ``E.pop(N)``, ``E.setdefault(N)``,
    ``os.getenv(N)`` on an environment E, N a string or a module constant naming one."""
    constants = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for target in node.targets
        if isinstance(target, ast.Name) and isinstance(node.value.value, str)
    }

    def name_of(arg: ast.expr) -> str | None:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return arg.value
        if isinstance(arg, ast.Name):
            return constants.get(arg.id)
        return None

    for node in ast.walk(tree):
        key: ast.expr | None = None
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("get", "pop", "setdefault", "getenv")
            and _is_environment(node.func.value)
            and node.args
        ):
            key = node.args[0]
        elif isinstance(node, ast.Subscript) and _is_environment(node.value):
            key = node.slice
        name = None if key is None else name_of(key)
        if key is not None and name is not None and ENV_NAME.fullmatch(name):
            yield key.lineno, name


def test_the_scan_sees_the_reads_it_checks() -> None:
    """Not vacuous: the scan finds reads of both kinds where they are known to be."""
    found = {name for _, tree in parsed() for _, name in environment_reads(tree)}
    assert {
        "GOOGLE_CLOUD_PROJECT",
        "PUBSUB_EMULATOR_HOST",
        PREFIX + "TASKS_QUEUE",  # config.py
        PREFIX + "TASKS_MAX_ATTEMPTS",  # delay/attempts.py, through its constant
        PREFIX + "STATE_DIR",  # the local stack
        PREFIX + "HANDLER",  # functions/consumer
    } <= found


def test_every_toolkit_environment_variable_is_prefixed() -> None:
    """Every environment read in the toolkit's code is a PUBSUB_TOOLKIT_* name of the table, or
    Google's / OpenTelemetry's own; no former bare name is left as a string anywhere in it."""
    problems = []
    for path, tree in parsed():
        where = path.relative_to(ROOT)
        for line, name in environment_reads(tree):
            if name.startswith(PREFIX):
                if name not in VARIABLES:
                    problems.append(f"{where}:{line}: {name} is not in environment.VARIABLES")
            elif not FOREIGN.fullmatch(name):
                problems.append(f"{where}:{line}: reads {name}, which is not PUBSUB_TOOLKIT_*")
        if path.name == "environment.py":
            continue  # the table of former names itself
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if node.value in FORMER_NAMES:
                    problems.append(f"{where}:{node.lineno}: the former bare name {node.value}")
                for name in re.findall(PREFIX + r"[A-Z0-9_]*[A-Z0-9]", node.value):
                    if name not in VARIABLES:
                        problems.append(f"{where}:{node.lineno}: {name} is in no table")
    assert problems == []
    assert all(name.startswith(PREFIX) for name in VARIABLES)


@pytest.mark.parametrize(
    "path",
    [
        "terraform/main.tf",
        "terraform/cloudrun.tf",
        "scripts/deploy-gcloud",
        "appengine/relay/app.yaml",
        "docs/reference/settings.md",
        "README.md",
    ],
)
def test_the_deploy_files_and_docs_name_only_known_variables(path: str) -> None:
    """Terraform's and the gcloud script's rendered environments, app.yaml and the docs: every
    PUBSUB_TOOLKIT_* name they carry is one the toolkit reads."""
    text = (ROOT / path).read_text(encoding="utf-8")
    named = set(re.findall(PREFIX + r"[A-Z0-9_]*[A-Z0-9]", text))
    assert named, path
    misspelt_on_purpose = {"PUBSUB_TOOLKIT_FIFO_MAX_ATTEMPT"}  # the settings page's example
    assert named - set(VARIABLES) - misspelt_on_purpose == set()


def test_terraform_renders_no_bare_name() -> None:
    """Each key of the module's environment maps is prefixed (or Google's)."""
    text = (ROOT / "terraform/main.tf").read_text(encoding="utf-8")
    text += (ROOT / "terraform/cloudrun.tf").read_text(encoding="utf-8")
    keys = set(re.findall(r"^\s*\{?\s*([A-Z][A-Z0-9_]+)\s*=", text, re.MULTILINE))
    keys |= set(re.findall(r"\{\s*([A-Z][A-Z0-9_]+)\s*=", text))
    assert keys and all(k.startswith(PREFIX) or FOREIGN.fullmatch(k) for k in keys), keys


def test_every_variable_is_documented() -> None:
    page = (ROOT / "docs/reference/settings.md").read_text(encoding="utf-8")
    assert [name for name in VARIABLES if f"`{name}`" not in page] == []


# --- the start-up check ------------------------------------------------------------------------


def test_a_misspelt_variable_stops_the_start_with_a_suggestion() -> None:
    """The issue's example: FIFO_MAX_ATTEMPT, one letter short, was silently ignored."""
    env = {**BASE, "PUBSUB_TOOLKIT_CONSUMER_ID": "c", "PUBSUB_TOOLKIT_FIFO_MAX_ATTEMPT": "3"}
    for start in (Settings.from_env, ConsumerSettings.from_env):
        with pytest.raises(ConfigurationError) as caught:
            start(env)
        assert str(caught.value) == (
            "unknown variable PUBSUB_TOOLKIT_FIFO_MAX_ATTEMPT: did you mean "
            "PUBSUB_TOOLKIT_FIFO_MAX_ATTEMPTS? (docs/reference/settings.md lists every one)"
        )


def test_the_entry_points_check_the_environment_at_start() -> None:
    """The functions, the relay and the CLI start with configure_entry_point (and the local
    stack's commands with check_environment): a misspelling stops them too, before anything."""
    from pubsub_toolkit.tracing_setup import configure_entry_point

    with pytest.raises(ConfigurationError, match="did you mean PUBSUB_TOOLKIT_TRACING"):
        configure_entry_point({"PUBSUB_TOOLKIT_TRACNG": "on"}, service="ingress")


def test_an_unknown_name_far_from_every_known_one_gets_no_guess() -> None:
    with pytest.raises(ConfigurationError) as caught:
        check_environment({"PUBSUB_TOOLKIT_ZZZ": "1", "PUBSUB_TOOLKIT_TRACING": "on"})
    assert str(caught.value) == (
        "unknown variable PUBSUB_TOOLKIT_ZZZ (docs/reference/settings.md lists every one)"
    )


def test_every_known_name_passes_the_check() -> None:
    check_environment(dict.fromkeys(VARIABLES, ""))


@pytest.fixture
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(environment, "_warned", set())


@pytest.mark.usefixtures("fresh_warnings")
def test_a_former_bare_name_is_not_read_and_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    env = {
        **BASE,
        "FIFO_MAX_ATTEMPTS": "9",
        "CONSUMER_ID": "old",
        "PUBSUB_TOOLKIT_CONSUMER_ID": "c",
    }
    with caplog.at_level(logging.WARNING, logger="pubsub_toolkit.environment"):
        consumer = ConsumerSettings.from_env(env)
        ConsumerSettings.from_env(env)
    assert (consumer.consumer_id, consumer.max_attempts) == ("c", 5)  # neither old value read
    # CONSUMER_ID is beside its new name: no warning (it may well be the application's own).
    assert [r.getMessage() for r in caplog.records] == [
        "FIFO_MAX_ATTEMPTS is set but no longer read: the toolkit's variables begin with "
        "PUBSUB_TOOLKIT_, set PUBSUB_TOOLKIT_FIFO_MAX_ATTEMPTS instead"
    ]


@pytest.mark.usefixtures("fresh_warnings")
def test_dedup_backend_points_at_the_store_backend(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="pubsub_toolkit.environment"):
        settings = Settings.from_env({**BASE, "DEDUP_BACKEND": "memory"})
    assert settings.store_backend == "firestore"
    assert "set PUBSUB_TOOLKIT_STORE_BACKEND instead" in caplog.text


def test_every_former_name_maps_to_a_known_one() -> None:
    assert set(FORMER_NAMES.values()) <= set(VARIABLES)
    assert {"REDIS_URL", "FINAL_TOPIC", "TRACING", "CONSUMER_ID", "DEDUP_BACKEND"} <= set(
        FORMER_NAMES
    )


# --- booleans ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "on", "off", "default"),
    [
        ("PUBSUB_TOOLKIT_TRACING", "on", "off", False),
        ("PUBSUB_TOOLKIT_FIFO_PARK", "true", "false", True),
        ("PUBSUB_TOOLKIT_RELAY_TRUST_CLOUD_RUN_IAM", "true", "false", False),
    ],
)
def test_a_boolean_takes_exactly_its_documented_values(
    name: str, on: str, off: str, default: bool
) -> None:
    assert (flag({name: on}, name), flag({name: f" {off} "}, name)) == (True, False)
    assert flag({}, name) is default and flag({name: ""}, name) is default
    for other in ("yes", "1", on.upper(), "no", "0"):
        with pytest.raises(ConfigurationError) as caught:
            flag({name: other}, name)
        assert str(caught.value) == f"{name} must be {on} or {off}, not {other!r}"


def test_tracing_yes_is_refused() -> None:
    """The issue's example: PUBSUB_TOOLKIT_TRACING=yes was accepted though the docs say on/off."""
    from pubsub_toolkit import tracing

    with pytest.raises(ConfigurationError, match="PUBSUB_TOOLKIT_TRACING must be on or off"):
        tracing.configure_from_env({"PUBSUB_TOOLKIT_TRACING": "yes"})


def test_the_park_flag_reads_the_same_from_env_and_code() -> None:
    env = {"PUBSUB_TOOLKIT_CONSUMER_ID": "c", "PUBSUB_TOOLKIT_FIFO_PARK": "yes"}
    with pytest.raises(ConfigurationError) as from_env:
        ConsumerSettings.from_env(env)
    with pytest.raises(ConfigurationError) as from_code:
        ConsumerSettings(consumer_id="c", park="yes")  # type: ignore[arg-type]
    assert (
        str(from_env.value)
        == str(from_code.value)
        == ("park (PUBSUB_TOOLKIT_FIFO_PARK) must be true or false, not 'yes'")
    )
