"""`publish` and `subscribe`."""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

from pubsub_toolkit.errors import ToolkitError
from pubsub_toolkit.operations.cli.common import (
    full_subscription,
    full_topic,
    require_emulator_if_local,
)


def cmd_publish(args: argparse.Namespace) -> int:
    from pubsub_toolkit.config import Settings
    from pubsub_toolkit.producer.publisher import Publisher
    from pubsub_toolkit.producer.sink import PubSubSink

    require_emulator_if_local()
    counter = None
    if args.fifo_group:
        from pubsub_toolkit.stores.factory import counter_from_settings

        counter = counter_from_settings(Settings.from_env())
    sink = PubSubSink()
    try:
        message_id = Publisher(sink, full_topic(args.topic), counter).publish(
            args.data.encode(),
            dict(args.attr),
            fifo_group=args.fifo_group,
            dedup_key=args.dedup_key,
            delay=args.delay,
            deliver_at=args.deliver_at,
        )
    except ValueError as exc:
        raise ToolkitError(str(exc)) from exc
    finally:
        sink.close()
    print(message_id)
    return 0


def cmd_subscribe(args: argparse.Namespace) -> int:
    from pubsub_toolkit.config import ConsumerSettings, Settings
    from pubsub_toolkit.consumer.processor import MessageProcessor
    from pubsub_toolkit.consumer.subscriber import Consumer
    from pubsub_toolkit.message import Message

    require_emulator_if_local()
    env = dict(os.environ)
    if args.consumer_id:
        env["CONSUMER_ID"] = args.consumer_id
    env.setdefault("CONSUMER_ID", "cli")
    handled = 0
    done = threading.Event()
    lock = threading.Lock()

    def show(message: Message) -> None:
        nonlocal handled
        with lock:
            handled += 1
            if args.json:
                record = {
                    "data": message.data.decode(errors="replace"),
                    "attributes": dict(message.attributes),
                    "message_id": message.message_id,
                }
                print(json.dumps(record), flush=True)
            else:
                attrs = " ".join(f"{k}={v}" for k, v in sorted(message.attributes.items()))
                print(f"{message.data.decode(errors='replace')}  [{attrs}]", flush=True)
            if args.max and handled >= args.max:
                done.set()

    processor = MessageProcessor.from_settings(
        Settings.from_env(env), ConsumerSettings.from_env(env), show
    )
    consumer = Consumer(full_subscription(args.subscription), processor)
    consumer.start()
    started = time.monotonic()
    try:
        while not done.wait(1.0):
            failure = consumer.stream_error()
            if failure is not None:
                raise ToolkitError(f"cannot read {args.subscription}: {failure}")
            if args.timeout and time.monotonic() - started >= args.timeout.total_seconds():
                break
            if args.max and not args.json:
                print(f"... {handled}/{args.max} handled", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        consumer.stop()
    if not args.json:
        print(f"{handled} message(s) handled", file=sys.stderr)
    return 0
