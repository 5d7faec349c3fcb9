"""The one loop that drives a sans-I/O protocol: perform each effect, send the result back.

Every protocol of the toolkit (the dedup claim loop, the FIFO gate, the idempotent processor,
the decorator's call shapes, the relay's release and hand-over) is a generator that yields the
effect it needs and receives its result. :func:`run` (with :func:`run_by_type`, its form that
dispatches by type) and :func:`run_async` are the only drivers' loops: each effect performed by
``perform``; its result sent in, or its exception thrown in at the very yield, so the
protocol's own ``try``/``except`` decides what it means (uncaught, it leaves the protocol and
the loop unchanged). A loop decides nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Mapping
from typing import Any, TypeVar

E = TypeVar("E")
T = TypeVar("T")


def run(protocol: Generator[E, Any, T], perform: Callable[[E], Any]) -> T:
    """Drive ``protocol`` synchronously (see the module docstring)."""
    try:
        effect = next(protocol)
        while True:
            try:
                reply = perform(effect)
            except BaseException as exc:  # the protocol decides what it means (or lets it out)
                effect = protocol.throw(exc)
            else:
                effect = protocol.send(reply)
    except StopIteration as stop:
        value: T = stop.value
        return value


def run_by_type(
    protocol: Generator[E, Any, T],
    fast: Mapping[type, Callable[[Any], Any]],
    perform: Callable[[E], Any],
) -> T:
    """:func:`run`, each effect performed by ``fast[type(effect)]`` when there is one, else by
    ``perform``. The same loop; a driver whose frequent effects are each one method (the FIFO
    gate's) saves the dispatching call per effect that :func:`run` would need - several per
    delivery on a CPU-bound consumer (issue 26)."""
    try:
        effect = next(protocol)
        while True:
            do = fast.get(type(effect))
            try:
                reply = perform(effect) if do is None else do(effect)
            except BaseException as exc:  # the protocol decides what it means (or lets it out)
                effect = protocol.throw(exc)
            else:
                effect = protocol.send(reply)
    except StopIteration as stop:
        value: T = stop.value
        return value


async def run_async(protocol: Generator[E, Any, T], perform: Callable[[E], Awaitable[Any]]) -> T:
    """Drive ``protocol`` on asyncio: each effect awaited from ``perform`` (cancellation
    included, thrown in like any error)."""
    try:
        effect = next(protocol)
        while True:
            try:
                reply = await perform(effect)
            except BaseException as exc:
                effect = protocol.throw(exc)
            else:
                effect = protocol.send(reply)
    except StopIteration as stop:
        value: T = stop.value
        return value
