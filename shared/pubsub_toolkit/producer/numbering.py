"""FIFO messages numbered off the caller's thread: one counter round trip for all that wait.

A Publisher on a future-returning sink does not reserve a number per ``publish`` call: the
call validates the message, queues it in its group and returns its future. One daemon thread
takes everything queued - per group, in the order the calls queued it - reserves ONE block
per group for it (one round trip for all the groups when the counter can: ``reserve_many``,
however many messages), numbers the messages in queue
order and hands them to the client, which sends them in that order (one ordering key per
group). So numbers are only ever reserved for messages already asked for (no block held
ahead: a crash leaves no more gap than before), each thread's messages of a group get
increasing numbers, and a group's numbers reach the client in ascending order.

The thread exits after ``idle`` seconds without work and starts again on the next message.
It is a daemon thread: wait for the futures (or use ``publish_batch``) before the process
exits, as with google-cloud-pubsub's own futures.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Waiting:
    """A validated message waiting for its number, and the future its caller holds."""

    data: bytes
    stamped: dict[str, str]
    future: Future[str]


# Numbers and sends every group's waiting messages, each group in order; settles each future.
SendGroups = Callable[[dict[str, list[Waiting]]], None]


class NumberingQueue:
    """Messages per group waiting for numbers, and the one thread that numbers them."""

    def __init__(self, send_groups: SendGroups, *, idle: float = 1.0) -> None:
        self._send_groups = send_groups
        self._idle = idle
        self._waiting: dict[str, list[Waiting]] = {}
        self._ready = threading.Condition(threading.Lock())
        self._running = False

    def submit(self, group: str, items: list[Waiting]) -> None:
        """Queue ``items`` (in order, together) behind what ``group`` already has waiting."""
        with self._ready:
            self._waiting.setdefault(group, []).extend(items)
            if not self._running:
                self._running = True
                threading.Thread(target=self._run, name="publisher-numbering", daemon=True).start()
            else:
                self._ready.notify()

    def _run(self) -> None:
        while True:
            with self._ready:
                if not self._waiting:
                    self._ready.wait(self._idle)
                if not self._waiting:
                    self._running = False  # under the lock: the next submit starts a thread
                    return
                taken, self._waiting = self._waiting, {}
            try:
                self._send_groups(taken)
            except Exception as exc:  # settle every future; never kill the thread
                logger.exception("numbering %d group(s) failed; their messages fail", len(taken))
                for items in taken.values():
                    for item in items:
                        if not item.future.done():
                            item.future.set_exception(exc)
