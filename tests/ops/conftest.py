"""Operations tests: the local stack on the session's emulators, the CLI as a user runs it, and
a recording consumer. Every process started here is stopped by process group afterwards."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta

import pytest

from pubsub_toolkit.config import ConsumerSettings, Settings
from pubsub_toolkit.consumer.processor import MessageProcessor
from pubsub_toolkit.consumer.subscriber import Consumer
from pubsub_toolkit.errors import PermanentError
from pubsub_toolkit.message import Message
from pubsub_toolkit_local.stack import LocalStack, RunningEmulators, StackOptions
from tests.conftest import repo_root

StackFactory = Callable[..., LocalStack]


@pytest.fixture
def make_stack(
    pubsub_emulator: str, firestore_emulator: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StackFactory]:
    """Start a fresh local stack (own project) on the session's emulators; ``extra_env`` goes
    to ingress and the relay. Ingress flushes its counters every 0.5 s here (5 s by default)."""
    stacks: list[LocalStack] = []

    def make(**extra_env: str) -> LocalStack:
        options = StackOptions(
            project=f"ops-{uuid.uuid4().hex[:10]}",
            emulators=RunningEmulators(
                os.environ["PUBSUB_EMULATOR_HOST"], os.environ["FIRESTORE_EMULATOR_HOST"]
            ),
            extra_env={"PUBSUB_TOOLKIT_STATS_FLUSH_SECONDS": "0.5", **extra_env},
        )
        stack = LocalStack(options, tmp_path_factory.mktemp("stack"), repo_root())
        stacks.append(stack)
        return stack.start()

    yield make
    for stack in stacks:
        stack.stop()


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``pubsub-toolkit ARGS`` as a user would, with ``env`` as the whole environment."""
    return subprocess.run(
        [sys.executable, "-m", "pubsub_toolkit_cli.cli", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@dataclass
class Recorder:
    """What a test consumer handled (FIFO ``(group, seq)`` or the dedup key) and every outcome."""

    handled: list[tuple[str, int] | str] = field(default_factory=list)
    outcomes: list[tuple[Message, str]] = field(default_factory=list)
    fixed: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handled_in(self, group: str) -> list[int]:
        with self.lock:
            return [h[1] for h in self.handled if isinstance(h, tuple) and h[0] == group]


@contextmanager
def recording_consumer(
    stack: LocalStack,
    consumer_id: str,
    *,
    poison_policy: str = "skip",
    max_attempts: int = 5,
    poison_data: bytes | None = None,
    refuse: bool = False,
) -> Iterator[Recorder]:
    """A real Consumer on the stack's final subscription; the handler fails on ``poison_data``
    until ``recorder.fixed`` is set (the operator's "fix") - with ``refuse``, by raising
    ``PermanentError("handler_refused", ...)`` (dead-lettered at once, also outside groups)."""
    assert stack.topology is not None
    recorder = Recorder()

    def handler(message: Message) -> None:
        if message.data == poison_data and not recorder.fixed.is_set():
            if refuse:
                raise PermanentError("handler_refused", "handler bug")
            raise RuntimeError("handler bug")
        attributes = message.attributes
        entry: tuple[str, int] | str = (
            (attributes["fifo_group"], int(attributes["fifo_seq"]))
            if "fifo_group" in attributes
            else attributes.get("dedup_key", message.message_id)
        )
        with recorder.lock:
            recorder.handled.append(entry)

    def on_outcome(message: Message, outcome: str) -> None:
        with recorder.lock:
            recorder.outcomes.append((message, outcome))

    settings = Settings.from_env(stack.env)
    consumer_settings = ConsumerSettings(
        consumer_id=consumer_id,
        max_attempts=max_attempts,
        poison_policy=poison_policy,  # type: ignore[arg-type]
        retry_backoff=timedelta(seconds=0.2),  # the poison arrives in a fraction of a second
    )
    processor = MessageProcessor.from_settings(settings, consumer_settings, handler)
    consumer = Consumer(stack.topology.final_sub, processor, on_outcome=on_outcome)
    consumer.start()
    try:
        yield recorder
    finally:
        consumer.stop()
