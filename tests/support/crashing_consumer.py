"""A consumer process that SIGKILLs itself between a message's effect and its ack.

``python -m tests.support.crashing_consumer SUBSCRIPTION LOG [--crash-after N]``

Runs :class:`Consumer` (concurrency 1, so no other handler is half-way when it dies) on unary pull
(the emulator leaves a killed *streaming* subscriber's stream registered, and it would keep the
subscription's messages from the restarted process for good) with settings from the environment
(``PUBSUB_TOOLKIT_CONSUMER_ID``, ``PUBSUB_TOOLKIT_STORE_BACKEND``, ...). The handler appends
``handled <dedup_key> <pid>`` to LOG; after the processor returns (effect done, dedup record or FIFO
advance committed) the outcome is appended as ``<outcome> <dedup_key> <pid>``. With ``--crash-after
N`` the process kills itself with SIGKILL right after the N-th ``processed`` outcome is logged -
before ``Consumer`` acks it - so Pub/Sub redelivers a message whose effect already happened. One
``O_APPEND`` write per line: lines from several processes stay whole.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from pubsub_toolkit.config import ConsumerSettings, Settings
from pubsub_toolkit.consumer.processor import MessageProcessor
from pubsub_toolkit.consumer.subscriber import Consumer
from pubsub_toolkit.message import Message
from pubsub_toolkit_cli.unary_pull import UnaryPullSubscriber


class CrashingProcessor(MessageProcessor):
    crash_after = 0
    log_fd = -1
    _processed = 0

    def process(self, message: Message) -> str:
        outcome = super().process(message)
        key = message.attributes.get("dedup_key", "?")
        os.write(self.log_fd, f"{outcome} {key} {os.getpid()}\n".encode())
        if outcome == "processed":
            self._processed += 1
            if self._processed == self.crash_after:
                os.kill(os.getpid(), signal.SIGKILL)  # Consumer never gets to ack this one
        return outcome


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("subscription")
    parser.add_argument("log")
    parser.add_argument("--crash-after", type=int, default=0)
    args = parser.parse_args()
    fd = os.open(args.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def handler(message: Message) -> None:
        os.write(fd, f"handled {message.attributes['dedup_key']} {os.getpid()}\n".encode())

    processor = CrashingProcessor.from_settings(
        Settings.from_env(), ConsumerSettings.from_env(), handler
    )
    assert isinstance(processor, CrashingProcessor)
    processor.crash_after, processor.log_fd = args.crash_after, fd
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    consumer = Consumer(
        args.subscription, processor, concurrency=1, subscriber=UnaryPullSubscriber()
    )
    consumer.start()
    print("ready", flush=True)
    stop.wait()
    finished = consumer.stop(timeout=30)
    os.close(fd)
    return 0 if finished else 1


if __name__ == "__main__":
    sys.exit(main())
