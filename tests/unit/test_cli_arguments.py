"""The command line's argument handling, without servers: help text everywhere, one-line errors.

Every value checked here is refused while the arguments are parsed, i.e. before any client is
created - the integration tests (tests/integration/test_cli_local_cases.py) show nothing is
published.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.auth.compute_engine import _metadata

from pubsub_toolkit_cli.cli import attach_dash_values, build_parser, main
from pubsub_toolkit_local.commands import build_parser as build_local_parser
from pubsub_toolkit_local.commands import parse_args as parse_local_args


def walk(
    parser: argparse.ArgumentParser, path: str = "pubsub-toolkit"
) -> Iterator[tuple[str, argparse.Action]]:
    """Every action of ``parser`` and of every subcommand below it, with its command path.

    ``local`` hands its arguments to the local stack's own parser, which is walked instead.
    """
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:  # the subcommands' own help lines
                yield f"{path} {choice.dest}", choice
            for name, sub in action.choices.items():
                if f"{path} {name}" == "pubsub-toolkit local":
                    yield from walk(build_local_parser(), "pubsub-toolkit local")
                else:
                    yield from walk(sub, f"{path} {name}")
        else:
            yield path, action


def test_every_command_and_option_has_help_text() -> None:
    missing = [
        f"{path}: {'/'.join(action.option_strings) or action.dest}"
        for path, action in walk(build_parser())
        if not action.help or action.help == argparse.SUPPRESS
    ]
    assert missing == []


def test_the_walk_sees_every_command() -> None:
    # Guards the test above: a walk that skipped subcommands would pass vacuously.
    paths = {path for path, _ in walk(build_parser())}
    for command in (
        "publish",
        "subscribe",
        "status",
        "dlq list",
        "dlq replay",
        "fifo skip",
        "local up",
        "local restart",
        "local heal",
        "local down",
        "dashboard",
    ):
        assert f"pubsub-toolkit {command}" in paths


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    code = exited.value.code
    return int(code) if isinstance(code, int) else 1, capsys.readouterr().err.splitlines()


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["publish", "--fifo-group", "", "x"], "'' is empty: a FIFO group needs a name"),
        (["publish", "--fifo-group", "   ", "x"], "is empty: a FIFO group needs a name"),
        (["publish", "--delay", "-5s", "x"], "'-5s' is a negative delay"),
        (["publish", "--delay=-5s", "x"], "'-5s' is a negative delay"),
        (["publish", "--delay", "soon", "x"], "'soon' is not a duration"),
        (["publish", "--delay", "400d", "x"], "at most 365 days ahead"),
        (["publish", "--deliver-at", "9999-12-31T23:59:59Z", "x"], "at most 365 days ahead"),
        (["publish", "--deliver-at", "tomorrow", "x"], "is not an RFC 3339 timestamp"),
        # a well-formed time that does not exist is named as such (no "no offset" riddle)
        (["publish", "--deliver-at", "2031-02-30T00:00:00Z", "x"], "is not a valid time: day"),
        (["subscribe", "--max", "-1"], "'-1' is negative"),
        (["subscribe", "--max", "five"], "'five' is not a whole number"),
        (["subscribe", "--timeout", "-3s"], "'-3s' is negative"),
        (["dlq", "list", "--limit", "0"], "0 is not allowed here"),
        (["fifo", "skip", "g", "0"], "0 is not allowed here"),
        (["local", "restart", "kafka"], "invalid choice: 'kafka'"),
        (["local", "up", "--pubsub-port", "99999"], "99999 is not a port (0-65535"),
        (["local", "up", "--relay-port", "-1"], "-1 is not a port (0-65535"),
        (["local", "up", "--redis-port", "six"], "'six' is not a port number"),
        (["publish"], "the following arguments are required: data"),
        (["dashboard", "--port", "99999"], "99999 is not a port (0-65535"),
        (["dashboard", "--port", "-1"], "-1 is not a port (0-65535"),
        (["dashboard", "--refresh", "0"], "0 is not allowed here"),
        (["status", "--group", ""], "'' is empty: name a FIFO group"),
        (["fifo", "skip", " ", "1"], "' ' is empty: name a FIFO group"),
        (["fifo", "replay", ""], "'' is empty: name a FIFO group"),
    ],
)
def test_a_bad_argument_gets_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    code, err = run(capsys, *argv)
    assert code == 2
    assert len(err) == 1, err
    assert says in err[0]
    assert err[0].startswith("pubsub-toolkit")


def test_a_dash_value_is_attached_to_its_option_only() -> None:
    assert attach_dash_values(["publish", "--delay", "-5s", "x"]) == ["publish", "--delay=-5s", "x"]
    assert attach_dash_values(["subscribe", "--timeout", "-1m"]) == ["subscribe", "--timeout=-1m"]
    # Other options, and option-looking words, are left to argparse.
    assert attach_dash_values(["publish", "--topic", "-x", "d"]) == [
        "publish",
        "--topic",
        "-x",
        "d",
    ]
    assert attach_dash_values(["publish", "--delay", "--json"]) == ["publish", "--delay", "--json"]


def test_a_due_time_within_the_limit_is_accepted() -> None:
    args = build_parser().parse_args(["publish", "--deliver-at", "2000-01-01T00:00:00Z", "x"])
    assert args.deliver_at.year == 2000  # in the past: due at once, which ingress accepts
    args = build_parser().parse_args(["publish", "--delay", "364d", "x"])
    assert args.delay.days == 364


def test_publish_end_of_group_is_a_flag_off_by_default() -> None:
    args = build_parser().parse_args(["publish", "--fifo-group", "g", "--end-of-group", "x"])
    assert args.end_of_group is True and args.fifo_group == "g"
    assert build_parser().parse_args(["publish", "--fifo-group", "g", "x"]).end_of_group is False


@pytest.mark.parametrize(
    ("argv", "project", "says"),
    [
        (["publish", "hello"], None, "environment variable GOOGLE_CLOUD_PROJECT is required"),
        (["publish", "hello"], "p", "publish: no Google credentials - point it at the emulators"),
        (["dlq", "list"], "p", "dlq: no Google credentials"),
    ],
)
def test_no_project_or_no_credentials_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    argv: list[str],
    project: str | None,
    says: str,
) -> None:
    """A new user's shell with nothing set: no traceback from google-auth."""
    for name in ("PUBSUB_EMULATOR_HOST", "FIRESTORE_EMULATOR_HOST", "GOOGLE_CLOUD_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no gcloud application-default file
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))
    # google-auth probes the GCE metadata server last: keep it on loopback (refused), and skip
    # its retries as NO_GCE_CHECK=true would (read at import, hence the module flag).
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:9")
    monkeypatch.setattr(_metadata, "_NO_GCE_CHECK", True)
    if project:
        monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", project)
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and says in err[0], err


def test_version_prints_the_packages_version(capsys: pytest.CaptureFixture[str]) -> None:
    import pubsub_toolkit

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"pubsub-toolkit {pubsub_toolkit.__version__}"


def test_redis_port_without_the_redis_backend_is_refused_not_ignored(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Nothing would listen on it. Parsed only (never run): a stack is not started here."""
    with pytest.raises(SystemExit) as exited:
        parse_local_args(["up", "--redis-port", "7000"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "pubsub-toolkit local: error: --redis-port is for --store-backend redis (the stack runs "
        "no redis-server with firestore) (see pubsub-toolkit local --help)"
    ]
    args = parse_local_args(["up", "--store-backend", "redis", "--redis-port", "7000"])
    assert args.redis_port == 7000
    assert parse_local_args(["up"]).redis_port is None  # the default port applies
