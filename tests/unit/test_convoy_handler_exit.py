"""The convoy dispatcher when work raises a ``BaseException`` that is not an ``Exception`` - a
handler's ``sys.exit()`` (a library giving up) or a ``KeyboardInterrupt`` raised in the
worker thread.

Before, the group was freed and its queued deliveries handed back, but the delivery being run
was neither acked nor nacked and nothing was logged (the pool kept the error in a future nobody
reads): google-cloud-pubsub's lease manager then held that message for up to an hour
(``max_lease_duration``) while its FIFO group waited behind it, silently. Found as a new user
on the emulator: a group stopped at #2, no log line. Now the delivery being run is handed
back too (the consumer's nack) and the error is logged."""

from __future__ import annotations

import logging

import pytest

from pubsub_toolkit.consumer.convoy import ConvoyDispatcher
from tests.support.waiting import wait_until


def exits() -> None:
    raise SystemExit("a library the handler uses called sys.exit()")


def test_a_handler_exit_in_a_group_hands_its_delivery_back_and_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    handed_back: list[int] = []
    dispatcher = ConvoyDispatcher(concurrency=1)
    dispatcher.submit("g", 1, exits, lambda: handed_back.append(1))
    wait_until(lambda: not dispatcher.is_active("g"), timeout=10, what="the group to be free")
    assert handed_back == [1]  # nacked: delivered again now, not held for an hour
    assert any(r.levelno >= logging.ERROR for r in caplog.records)
    assert dispatcher.close(timeout=10)


def test_a_handler_exit_outside_groups_hands_its_delivery_back_and_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    handed_back: list[str] = []
    dispatcher = ConvoyDispatcher(concurrency=1)
    dispatcher.submit(None, 0, exits, lambda: handed_back.append("x"))
    assert dispatcher.close(timeout=10)  # waits for the work to end
    assert handed_back == ["x"]
    assert any(r.levelno >= logging.ERROR for r in caplog.records)
