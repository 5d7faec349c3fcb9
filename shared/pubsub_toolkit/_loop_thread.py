"""An event loop of its own on a background thread, for sync callers of async code.

google-cloud-pubsub calls a subscriber callback on its own threads and functions-framework's
Flask server calls an HTTP function on its threads; an ``async def`` handler and the async
stores (``redis.asyncio``, Firestore's ``AsyncClient``) need one loop that lives as long as
their clients. :class:`LoopThread` is that loop: started on first use, every coroutine handed
to it runs there (so the async clients made on it stay on it), stopped by :meth:`stop`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """One event loop on a daemon thread; :meth:`submit` and :meth:`run` hand it coroutines."""

    def __init__(self, name: str = "pubsub-toolkit-loop") -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop, started on first use."""
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name=self._name, daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    @property
    def started(self) -> bool:
        return self._loop is not None

    def submit(self, work: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``work`` on the loop; its future (thread-safe)."""
        return asyncio.run_coroutine_threadsafe(work, self.loop)

    def run(self, work: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``work`` on the loop and wait for its result (never call it on the loop)."""
        return self.submit(work).result(timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the loop and join its thread (pending tasks are cancelled by the caller)."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)
        if not thread.is_alive():
            loop.close()
