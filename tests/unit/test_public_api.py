"""The public surface: a small ``__all__`` at the top level, each name documented and importable."""

from __future__ import annotations

import inspect

import pubsub_toolkit


def public_names() -> list[str]:
    return [name for name in pubsub_toolkit.__all__ if name != "__version__"]


def test_the_top_level_stays_small() -> None:
    # The budget is about 15 names: what a user reaches for, nothing internal.
    assert len(public_names()) <= 16, public_names()
    assert len(set(pubsub_toolkit.__all__)) == len(pubsub_toolkit.__all__)


def test_every_public_name_loads_and_has_a_docstring() -> None:
    for name in public_names():
        value = getattr(pubsub_toolkit, name)
        assert inspect.getdoc(value), f"pubsub_toolkit.{name} has no docstring"
        assert getattr(value, "__name__", name) == name


def test_the_adoption_names_are_there() -> None:
    for name in (
        "idempotent",
        "Publisher",
        "Consumer",
        "RedisBackend",
        "FirestoreBackend",
        "Settings",
        "PermanentError",
        "TransientError",
    ):
        assert name in pubsub_toolkit.__all__, name


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        pubsub_toolkit.FifoGate  # noqa: B018 - internal now: pubsub_toolkit.consumer.gate
    except AttributeError as exc:
        assert "FifoGate" in str(exc)
    else:
        raise AssertionError("FifoGate is not part of the top-level surface")
