"""A consumer process for tests: ``python -m tests.support.consumer_worker SUBSCRIPTION LOG``.

Runs :class:`Consumer` with settings from the environment (``PUBSUB_TOOLKIT_CONSUMER_ID``,
``PUBSUB_TOOLKIT_STORE_BACKEND``, ...) and a handler that appends ``group seq pid`` (or ``- key
pid``) to LOG with one ``O_APPEND`` write per line, so lines from several processes interleave whole
and in the order they happened. Stops on SIGTERM, gracefully.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

from pubsub_toolkit.config import ConsumerSettings, Settings
from pubsub_toolkit.consumer.processor import MessageProcessor
from pubsub_toolkit.consumer.subscriber import Consumer
from pubsub_toolkit.message import Message


def main() -> int:
    subscription, log_path = sys.argv[1], sys.argv[2]
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def handler(message: Message) -> None:
        group = message.attributes.get("fifo_group", "-")
        seq = message.attributes.get("fifo_seq", message.attributes.get("dedup_key", "?"))
        os.write(fd, f"{group} {seq} {os.getpid()}\n".encode())

    processor = MessageProcessor.from_settings(
        Settings.from_env(), ConsumerSettings.from_env(), handler
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    consumer = Consumer(subscription, processor, concurrency=8)
    consumer.start()
    print("ready", flush=True)
    stop.wait()
    finished = consumer.stop(timeout=30)
    os.close(fd)
    return 0 if finished else 1


if __name__ == "__main__":
    sys.exit(main())
