"""Each consumer shape (:mod:`tests.simulation.shapes`) keeps every invariant, and its schedules
see a line broken in the code only that shape runs (the asyncio processor's driver, the
``@idempotent`` decorator's answer, the convoy's bookkeeping): the shapes drive the real code,
so they can fail."""

from __future__ import annotations

from typing import Any

import pytest

from tests.simulation.mutations import Mutation, SourceEdit, applied
from tests.simulation.shapes import Shape
from tests.simulation.world import Options, run_schedule

NEW_SHAPES = (Shape.CALLBACK, Shape.CLOUDEVENT, Shape.ASYNCIO, Shape.CONVOY)
BOUND = 300  # schedules of the shape within which each broken line must be found

BROKEN: dict[Shape, Mutation] = {
    # The asyncio processor's driver takes a failed handler for one that returned None.
    Shape.ASYNCIO: Mutation(
        "asyncio-driver",
        "the asyncio processor swallows the handler's exception",
        (
            SourceEdit(
                "pubsub_toolkit.consumer.processor_async",
                "AsyncMessageProcessor._perform",
                "                return await handler_call(call(argument))\n",
                "                try:\n"
                "                    return await handler_call(call(argument))\n"
                "                except Exception:\n"
                "                    return None\n",
            ),
        ),
    ),
    # The decorator acks a subscriber delivery whose handling failed.
    Shape.CALLBACK: Mutation(
        "decorator-ack",
        "a failed delivery is acked",
        (
            SourceEdit(
                "pubsub_toolkit.core.consume",
                "answer",
                "    return Answer.NACK\n",
                "    return Answer.ACK\n",
            ),
        ),
    ),
    # A CloudEvent whose key is being run elsewhere is answered 2xx (acked), not 503.
    Shape.CLOUDEVENT: Mutation(
        "decorator-503",
        "a key in progress elsewhere is acked",
        (
            SourceEdit(
                "pubsub_toolkit.decorators",
                "Idempotent._on_cloud_event",
                "flask.abort(503, description=consume.IN_PROGRESS)",
                "return None",
            ),
        ),
    ),
    # The convoy leaves a drained group marked active: its later deliveries are never run.
    Shape.CONVOY: Mutation(
        "convoy-active",
        "a drained group is never freed",
        (
            SourceEdit(
                "pubsub_toolkit.core.convoy",
                "GroupQueues.take",
                "            self._queues.pop(group, None)\n            return []\n",
                "            return []\n",
            ),
        ),
    ),
}


@pytest.mark.parametrize("shape", NEW_SHAPES, ids=str)
def test_a_shape_keeps_every_invariant(shape: Shape) -> None:
    for seed in range(30):
        result = run_schedule(seed, Options(shapes=(shape.value,)))
        assert result.shape == shape.value
        assert not result.violations, (seed, [str(v) for v in result.violations])


def _search(mutation: Mutation, shape: Shape) -> dict[str, Any]:
    options = Options(shapes=(shape.value,))
    for n, seed in enumerate(range(BOUND), 1):
        with applied(mutation):
            mutated = run_schedule(seed, options)
        if not mutated.violations:
            continue
        known = {(v.invariant, v.lid) for v in run_schedule(seed, options).violations}
        new = [str(v) for v in mutated.violations if (v.invariant, v.lid) not in known]
        if new:
            return {"found": True, "seed": seed, "schedules_needed": n, "violation": new[0]}
    return {"found": False}


@pytest.mark.parametrize("shape", NEW_SHAPES, ids=str)
def test_a_line_only_the_shape_runs_broken_is_found(shape: Shape) -> None:
    found = _search(BROKEN[shape], shape)
    assert found["found"], f"{BROKEN[shape].what}: not found in {BOUND} {shape} schedules"
