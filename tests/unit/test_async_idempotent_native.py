"""``AsyncIdempotentProcessor`` drives the core's protocol on asyncio itself: it awaits the
async store and the ``async def`` effect in the caller's task, with no greenlet bridge (issue
26: "one async delivery crosses nine objects and a greenlet bridge")."""

from __future__ import annotations

import ast
import asyncio
import inspect
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta

import pytest

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.dedup import idempotent_async
from pubsub_toolkit.dedup.idempotent import Outcome
from pubsub_toolkit.dedup.idempotent_async import AsyncIdempotentProcessor
from pubsub_toolkit.stores.dedup.memory import AsyncMemoryDedupStore


def test_the_async_processor_module_imports_no_bridge_and_no_greenlet() -> None:
    tree = ast.parse(inspect.getsource(idempotent_async))
    imported = {
        node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
    } | {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert not {name for name in imported if "_bridge" in name or "greenlet" in name}


def _in_a_greenlet() -> bool:
    """True when the caller runs in a greenlet other than the thread's main one."""
    greenlet = sys.modules.get("greenlet")
    return greenlet is not None and greenlet.getcurrent().parent is not None


def test_the_effect_is_awaited_in_the_callers_task_outside_any_greenlet() -> None:
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
    processor = AsyncIdempotentProcessor(
        AsyncMemoryDedupStore(clock),
        namespace="orders",
        lease=timedelta(seconds=60),
        ttl=timedelta(days=1),
        clock=clock,
    )
    seen: list[tuple[asyncio.Task[object] | None, bool]] = []

    async def effect() -> str:
        seen.append((asyncio.current_task(), _in_a_greenlet()))
        return "charged"

    async def main() -> tuple[asyncio.Task[object] | None, object]:
        result = await processor.process("k", "fp", effect)
        return asyncio.current_task(), result

    caller, result = asyncio.run(main())
    assert seen == [(caller, False)]
    assert result == idempotent_async.ProcessResult(Outcome.PROCESSED, "charged")


def test_a_cancelled_effect_releases_its_claim_for_the_redelivery() -> None:
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
    store = AsyncMemoryDedupStore(clock)
    processor = AsyncIdempotentProcessor(
        store, namespace="orders", lease=timedelta(seconds=60), ttl=timedelta(days=1), clock=clock
    )
    started = asyncio.Event()

    async def hangs() -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    async def again() -> str:
        return "second"

    async def main() -> object:
        task = asyncio.create_task(processor.process("k", "fp", hangs))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # released, not left to its lease: the redelivery runs at once, as a retry
        return await processor.process("k", "fp", again)

    assert asyncio.run(main()) == idempotent_async.ProcessResult(Outcome.PROCESSED, "second")


def test_the_async_processor_runs_without_greenlet_installed() -> None:
    # A fresh interpreter where importing greenlet fails, as without the ``asyncio`` extra.
    script = textwrap.dedent(
        """
        import asyncio, sys
        from datetime import timedelta
        sys.modules["greenlet"] = None  # import greenlet -> ImportError
        from pubsub_toolkit.dedup.idempotent_async import AsyncIdempotentProcessor
        from pubsub_toolkit.stores.dedup.memory import AsyncMemoryDedupStore

        async def effect():
            return "ok"

        processor = AsyncIdempotentProcessor(
            AsyncMemoryDedupStore(), namespace="n", lease=timedelta(seconds=5), ttl=timedelta(1)
        )
        first = asyncio.run(processor.process("k", "fp", effect))
        again = asyncio.run(processor.process("k", "fp", effect))
        print(first.outcome, first.result, again.outcome, again.result)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["processed", "ok", "duplicate", "ok"]
