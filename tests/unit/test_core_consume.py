"""Table tests of :mod:`pubsub_toolkit.core.consume`: what a consumer does with one delivery,
decided once for the sync and the asyncio drivers (issue 26).

Each protocol is driven by hand (the test answers every effect it yields), and by both drivers
(:func:`~pubsub_toolkit.core.consume.run`, :func:`~pubsub_toolkit.core.consume.run_async`),
which must see the same effects in the same order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from datetime import timedelta
from typing import Any

import pytest

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.core import consume
from pubsub_toolkit.core.consume import (
    Answer,
    ListGroups,
    Process,
    Ran,
    Reject,
    RunOnce,
    StartSweeper,
    Sweep,
    Unguarded,
)
from pubsub_toolkit.errors import (
    ClaimInProgressError,
    ConfigurationError,
    MissingDependencyError,
    PermanentError,
    RetryLater,
    TransientError,
)
from pubsub_toolkit.message import Message

PLAIN = Message(b"x", {}, message_id="m1")
KEYED = Message(b"x", {attr.DEDUP_KEY: "k"}, message_id="m1")
GROUPED = Message(b"x", {attr.DEDUP_KEY: "k", attr.FIFO_GROUP: "g", attr.FIFO_SEQ: "1"}, "m1")
UNREADABLE = PermanentError("invalid_envelope", "not a Pub/Sub message")


def trace(
    protocol: Generator[Any, object, Any], replies: Callable[[Any], object]
) -> tuple[list[Any], Any]:
    """Drive ``protocol`` with the sync driver; (the effects it yielded, its result)."""
    effects: list[Any] = []

    def perform(effect: Any) -> object:
        effects.append(effect)
        return replies(effect)

    return effects, consume.run(protocol, perform)


def trace_async(
    protocol: Generator[Any, object, Any], replies: Callable[[Any], object]
) -> tuple[list[Any], Any]:
    """As :func:`trace`, with the asyncio driver."""
    effects: list[Any] = []

    async def perform(effect: Any) -> object:
        effects.append(effect)
        await asyncio.sleep(0)
        return replies(effect)

    return effects, asyncio.run(consume.run_async(protocol, perform))


def reply(effect: Any) -> object:
    """What a store-less world answers: the handler returns "value", a run once ran it."""
    if isinstance(effect, RunOnce):
        return Ran(called=True, value="value", stored="value")
    if isinstance(effect, Unguarded):
        return "unguarded value"
    if isinstance(effect, Reject | Process):
        return "dead_lettered" if isinstance(effect, Reject) else "processed"
    return None


@pytest.mark.parametrize(
    ("message", "keyed", "missing", "effects"),
    [
        # keyed, outside groups: the processor's path, no sweeper
        (KEYED, KEYED, "dead_letter", [Process(KEYED)]),
        # grouped: the sweeper first (parked heads need it), then the processor
        (GROUPED, GROUPED, "dead_letter", [StartSweeper(), Process(GROUPED)]),
        # no key: never run unguarded by default - dead-lettered invalid_dedup_key
        (
            PLAIN,
            None,
            "dead_letter",
            [Reject(PLAIN, PermanentError(attr.REASON_INVALID_DEDUP_KEY, consume.NO_KEY))],
        ),
        # no key and on_missing_key="run": the handler, unguarded
        (PLAIN, None, "run", [Unguarded(PLAIN)]),
    ],
    ids=["keyed", "grouped", "no-key", "no-key-run"],
)
@pytest.mark.parametrize("drive", [trace, trace_async], ids=["sync", "asyncio"])
def test_a_subscriber_delivery(
    message: Message,
    keyed: Message | None,
    missing: consume.MissingKey,
    effects: list[Any],
    drive: Callable[..., tuple[list[Any], Any]],
) -> None:
    seen, result = drive(consume.pubsub_delivery(message, keyed, missing), reply)
    assert [_comparable(e) for e in seen] == [_comparable(e) for e in effects]
    assert result is None


@pytest.mark.parametrize(
    ("unreadable", "keyed", "missing", "ran", "effects", "returns"),
    [
        (UNREADABLE, None, "dead_letter", None, [Reject(PLAIN, UNREADABLE)], None),
        # unreadable beats on_missing_key="run": nothing to hand the handler
        (UNREADABLE, None, "run", None, [Reject(PLAIN, UNREADABLE)], None),
        (None, None, "run", None, [Unguarded(PLAIN)], "unguarded value"),
        (
            None,
            None,
            "dead_letter",
            None,
            [Reject(PLAIN, PermanentError(attr.REASON_INVALID_DEDUP_KEY, consume.NO_KEY))],
            None,
        ),
        # ran here: the handler's own return value (not its stored str)
        (None, KEYED, "dead_letter", Ran(True, 42, "42"), [RunOnce(KEYED)], 42),
        # a duplicate: the first run's stored result
        (None, KEYED, "dead_letter", Ran(False, None, "first"), [RunOnce(KEYED)], "first"),
        # ran here and returned None: None, even if a result were stored
        (None, KEYED, "dead_letter", Ran(True, None, "stale"), [RunOnce(KEYED)], None),
    ],
    ids=[
        "unreadable",
        "unreadable-run",
        "no-key-run",
        "no-key",
        "ran",
        "duplicate",
        "ran-none",
    ],
)
@pytest.mark.parametrize("drive", [trace, trace_async], ids=["sync", "asyncio"])
def test_a_cloud_event(
    unreadable: PermanentError | None,
    keyed: Message | None,
    missing: consume.MissingKey,
    ran: Ran | None,
    effects: list[Any],
    returns: object,
    drive: Callable[..., tuple[list[Any], Any]],
) -> None:
    def replies(effect: Any) -> object:
        return ran if isinstance(effect, RunOnce) else reply(effect)

    protocol = consume.cloud_event(PLAIN, unreadable, keyed, missing)
    seen, result = drive(protocol, replies)
    assert [_comparable(e) for e in seen] == [_comparable(e) for e in effects]
    assert result == returns


@pytest.mark.parametrize("drive", [trace, trace_async], ids=["sync", "asyncio"])
def test_an_effects_error_passes_through_both_drivers_unchanged(
    drive: Callable[..., tuple[list[Any], Any]],
) -> None:
    failure = ClaimInProgressError("held elsewhere")

    def replies(effect: Any) -> object:
        raise failure

    with pytest.raises(ClaimInProgressError) as raised:
        drive(consume.cloud_event(KEYED, None, KEYED, "dead_letter"), replies)
    assert raised.value is failure


@pytest.mark.parametrize(
    ("error", "verdict"),
    [
        (None, Answer.ACK),
        (ConfigurationError("PUBSUB_TOOLKIT_CONSUMER_ID is not set"), Answer.HOLD_BACK),
        (MissingDependencyError("pip install 'pubsub-toolkit[redis]'"), Answer.HOLD_BACK),
        (TransientError("down"), Answer.NACK),
        (RetryLater(timedelta(seconds=1)), Answer.NACK),
        (PermanentError("r", "no dead-letter topic"), Answer.NACK),
        (RuntimeError("handler bug"), Answer.NACK),
    ],
    ids=["ok", "setting", "extra", "transient", "retry-later", "permanent", "bug"],
)
def test_the_answer_to_a_subscriber_delivery(error: Exception | None, verdict: Answer) -> None:
    assert consume.answer(error) is verdict


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (TransientError("down"), "retry"),
        (ClaimInProgressError("held"), "retry"),
        (RuntimeError("bug"), "error"),
        (PermanentError("r", "d"), "error"),
    ],
)
def test_a_nacks_outcome(error: Exception, outcome: str) -> None:
    assert consume.failure_outcome(error) == outcome


class _Delivery:
    def __init__(self, ack: object, nack: object) -> None:
        self.ack, self.nack = ack, nack


@pytest.mark.parametrize(
    ("delivery", "subscriber"),
    [
        (_Delivery(lambda: None, lambda: None), True),
        (_Delivery(lambda: None, None), False),  # a CloudEvent has no ack()/nack()
        (_Delivery("ack", "nack"), False),  # attributes, not methods
        (object(), False),
    ],
    ids=["message", "no-nack", "not-callable", "event"],
)
def test_which_call_shape_a_delivery_is(delivery: object, subscriber: bool) -> None:
    assert consume.is_subscriber_message(delivery) is subscriber


@pytest.mark.parametrize(
    ("groups", "busy", "stop_after", "sweeps"),
    [
        ([], set(), None, []),
        (["a", "b", "c"], set(), None, ["a", "b", "c"]),
        # a group this process is running is left to that delivery
        (["a", "b", "c"], {"b"}, None, ["a", "c"]),
        # stopping ends the pass before the next group
        (["a", "b", "c"], set(), 1, ["a"]),
        (["a", "b", "c"], set(), 0, []),
    ],
    ids=["none", "all", "busy", "stopping", "stopped"],
)
@pytest.mark.parametrize("drive", [trace, trace_async], ids=["sync", "asyncio"])
def test_a_sweep_pass(
    groups: list[str],
    busy: set[str],
    stop_after: int | None,
    sweeps: list[str],
    drive: Callable[..., tuple[list[Any], Any]],
) -> None:
    swept: list[str] = []

    def stopping() -> bool:
        return stop_after is not None and len(swept) >= stop_after

    def replies(effect: Any) -> object:
        if isinstance(effect, Sweep):
            swept.append(effect.group)
            return None
        return list(groups)

    seen, _ = drive(consume.sweep_pass(stopping, busy.__contains__), replies)
    assert seen == [ListGroups(), *(Sweep(g) for g in sweeps)]


def _comparable(effect: Any) -> Any:
    """Effects compare by value; a PermanentError inside by its reason and detail."""
    if isinstance(effect, Reject):
        return ("reject", effect.message, effect.error.reason, effect.error.detail)
    return effect


@pytest.mark.parametrize(
    ("finished", "returns"), [(True, True), (False, False), (None, False)], ids=str
)
@pytest.mark.parametrize("drive", [trace, trace_async], ids=["sync", "asyncio"])
def test_a_graceful_stop_closes_the_stream_only_after_the_running_deliveries(
    finished: bool | None, returns: bool, drive: Callable[..., tuple[list[Any], Any]]
) -> None:
    def replies(effect: Any) -> object:
        return finished if isinstance(effect, consume.Drain) else None

    seen, result = drive(consume.graceful_stop(5.0), replies)
    assert seen == [
        consume.RefuseNew(),
        consume.Drain(5.0),
        consume.CloseStream(5.0),
        consume.StopSweeper(5.0),
        consume.ReleaseHeld(),
        consume.CloseClient(),
    ]
    assert result is returns
