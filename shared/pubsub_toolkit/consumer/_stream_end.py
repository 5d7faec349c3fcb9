"""How a consumer's stream ended: what ``Consumer.result()`` (and ``AsyncConsumer.result()``)
returns or raises; and :func:`close_stream`, how both consumers end it.

Settled once: by the consumer's ``stop()`` (a clean stop: ``result()`` returns), or by the
stream ending on its own - a missing or forbidden subscription, bad credentials: the client's
streaming pull gives up on errors it cannot retry (NotFound, PermissionDenied, ...) - which is
logged at ERROR when it happens and raised by ``result()``. The google-cloud-pubsub client
itself logs that 404 at DEBUG only, so without this a consumer would idle silently.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)


class StreamEnd:
    """The end of one consumer's stream, as a thread-safe future of None."""

    def __init__(self, subscription: str) -> None:
        self._subscription = subscription
        self.future: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._lock = threading.Lock()
        self._watching = False

    def watch(self, stream: Any, stopping: Callable[[], bool]) -> None:
        """Settle when ``stream`` (the client's streaming-pull future) ends, unless
        ``stopping()`` says the consumer's own ``stop()`` ended it (that settles it)."""
        self._watching = True

        def ended(done: Any) -> None:
            if stopping():
                return
            try:
                error = done.exception(timeout=0)
            except concurrent.futures.CancelledError:
                error = None
            if error is None:
                logger.warning(
                    "the stream of %s ended by itself; no more messages", self._subscription
                )
                self._settle(None)
                return
            logger.error(
                "the stream of %s failed and takes no more messages: %s: %s "
                "(Consumer.result() raises it)",
                self._subscription,
                type(error).__name__,
                error,
            )
            self._settle(error)

        stream.add_done_callback(ended)

    def stopped(self) -> None:
        """The consumer's ``stop()`` finished: ``result()`` returns (if nothing failed first)."""
        self._settle(None)

    def error(self) -> BaseException | None:
        """The error that ended the stream, if it failed."""
        if not self.future.done():
            return None
        return self.future.exception(timeout=0)

    def result(self, timeout: float | None = None) -> None:
        """Wait for the end: None after a clean stop, else raise the stream's error.
        TimeoutError after ``timeout`` seconds; RuntimeError if the consumer never started."""
        if not self._watching and not self.future.done():
            raise RuntimeError("the consumer is not started: start() it (or use `with`) first")
        self.future.result(timeout)

    def _settle(self, error: BaseException | None) -> None:
        with self._lock:
            if self.future.done():
                return  # the first end is the one that counts
            if error is None:
                self.future.set_result(None)
            else:
                self.future.set_exception(error)


def close_stream(stream: Any, timeout: float) -> None:
    """Cancel a consumer's streaming pull and wait up to ``timeout`` for it to end (it blocks:
    the client joins its own threads). Its CancelledError is the expected end."""
    stream.cancel()
    try:
        stream.result(timeout=timeout)
    except Exception:  # the stream ends with CancelledError by design
        logger.debug("stream closed", exc_info=True)
