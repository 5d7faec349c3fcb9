"""`publish` and `subscribe`."""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Any

from pubsub_toolkit.errors import ContractViolation, ToolkitError, TransientError
from pubsub_toolkit_cli.cli.common import (
    full_subscription,
    full_topic,
    require_emulator_if_local,
)
from pubsub_toolkit_cli.cli.exits import UsageError

# Attributes the Publisher writes itself (a group's numbers come from its counter): on the
# command line they are --fifo-group and --end-of-group, never --attr.
_PUBLISHER_ATTRIBUTES = ("fifo_group", "fifo_seq", "fifo_end", "fifo_epoch")


def check_publish_options(args: argparse.Namespace) -> None:
    """Refuse, in the command line's own words, options of `publish` that cannot go together,
    before any client is made (the Publisher would refuse them too, in its keywords)."""
    if args.end_of_group and args.fifo_group is None:
        raise UsageError("--end-of-group needs --fifo-group: only a FIFO group can end")
    for key, _ in args.attr:
        if key in _PUBLISHER_ATTRIBUTES:
            raise UsageError(
                f"--attr {key}: the FIFO attributes come from --fifo-group (numbered by the "
                "counter) and --end-of-group"
            )
        if key == "dedup_key" and args.dedup_key is not None:
            raise UsageError(
                "--attr dedup_key and --dedup-key: give the key once, with --dedup-key"
            )


def cmd_publish(args: argparse.Namespace) -> int:
    """`publish`: one message through the Publisher (contract checked before publishing)."""
    from google.api_core.exceptions import GoogleAPICallError

    from pubsub_toolkit.config import Settings
    from pubsub_toolkit.producer.publisher import Publisher
    from pubsub_toolkit.producer.sink import PubSubSink

    check_publish_options(args)
    data = sys.stdin.buffer.read() if args.data == "-" else args.data.encode()
    require_emulator_if_local()
    topic = full_topic(args.topic)  # a missing project is said before any client is made
    counter = None
    if args.fifo_group is not None:
        from pubsub_toolkit.stores.factory import counter_from_settings

        counter = counter_from_settings(Settings.from_env())
    sink = PubSubSink()
    try:
        message_id = (
            Publisher(sink, topic, counter)
            .publish(
                data,
                dict(args.attr),
                fifo_group=args.fifo_group,
                dedup_key=args.dedup_key,
                delay=args.delay,
                deliver_at=args.deliver_at,
                end_of_group=args.end_of_group,
            )
            .result()
        )
    except (ValueError, ContractViolation) as exc:
        # Refused before anything was published: the message as given cannot be sent (exit 2).
        raise UsageError(str(exc)) from exc
    except GoogleAPICallError as exc:  # the future's failure: one line that names the topic
        raise TransientError(f"publish to {topic} failed: {exc}") from exc
    finally:
        sink.close()
    print(json.dumps({"message_id": message_id, "topic": topic}) if args.json else message_id)
    return 0


class MaxReachedError(TransientError):
    """`subscribe --max N` has handled N: this message goes back (nack) for the next consumer."""


class _Quota:
    """Hands out at most ``limit`` turns (0: unlimited); thread-safe."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.taken = 0
        self.refused = 0
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            if self.limit and self.taken >= self.limit:
                self.refused += 1
                return False
            self.taken += 1
            return True


def _subscriber(choice: str) -> Any:
    """The client `subscribe` receives with: unary pull against the emulator (``auto``)."""
    from pubsub_toolkit_cli.emulator import subscriber_client

    unary = choice == "unary" or (
        choice == "auto" and bool(os.environ.get("PUBSUB_EMULATOR_HOST", "").strip())
    )
    if not unary:
        return subscriber_client()
    from pubsub_toolkit_cli.unary_pull import UnaryPullSubscriber

    return UnaryPullSubscriber(subscriber_client())


def cmd_subscribe(args: argparse.Namespace) -> int:
    """`subscribe`: the Consumer with dedup and the FIFO gate, printing what it handles.

    ``--max N`` handles exactly N: the handler takes a turn from a quota before it prints; a
    message that finds the quota spent raises :class:`MaxReachedError` (transient), so it is
    nacked - released at once - and dedup releases its claim. Flow control holds at most N
    messages, so little is pulled beyond what is handled. Duplicates are acked without being
    handled and do not count. In a FIFO group, a number the gate had parked and would run
    right after the N-th is left parked instead (with the gate's retry backoff), for the next
    consumer's sweeper.
    """
    from pubsub_toolkit.config import ConsumerSettings, Settings
    from pubsub_toolkit.consumer.processor import MessageProcessor
    from pubsub_toolkit.consumer.subscriber import Consumer
    from pubsub_toolkit.message import Message

    require_emulator_if_local()
    env = dict(os.environ)
    if args.consumer_id:
        env["PUBSUB_TOOLKIT_CONSUMER_ID"] = args.consumer_id
    env.setdefault("PUBSUB_TOOLKIT_CONSUMER_ID", "cli")
    quota = _Quota(args.max)
    done = threading.Event()
    output = threading.Lock()

    def show(message: Message) -> None:
        if not quota.take():
            raise MaxReachedError(f"--max {args.max} reached: released for the next consumer")
        with output:
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
        if args.max and quota.taken >= args.max:
            done.set()

    processor = MessageProcessor.from_settings(
        Settings.from_env(env), ConsumerSettings.from_env(env), show
    )
    consumer = Consumer(
        full_subscription(args.subscription),
        processor,
        max_outstanding=min(args.max, 1000) if args.max else 1000,
        subscriber=_subscriber(args.pull),
    )
    consumer.start()
    started = time.monotonic()
    shown = 0  # progress is printed when it moves, not every second
    try:
        while not done.wait(1.0):
            failure = consumer.stream_error()
            if failure is not None:
                raise ToolkitError(f"cannot read {args.subscription}: {failure}")
            if args.timeout and time.monotonic() - started >= args.timeout.total_seconds():
                break
            if args.max and not args.json and quota.taken != shown:
                shown = quota.taken
                print(f"... {shown}/{args.max} handled", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        consumer.stop()
    if not args.json:
        print(f"{quota.taken} message(s) handled", file=sys.stderr)
    return 0
