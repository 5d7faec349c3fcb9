"""A producer's attribute that looks like a mistyped toolkit attribute is named, with the name
it probably meant, at ingress.

Found by a new user publishing by hand from a foreign client: ``delay_second`` (for
``delay_seconds``) delivered the message at once, ``fifo_sq`` and ``Dedup_Key`` passed as
business attributes - the toolkit reads only its exact names, and nothing said so.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.ingress.pipeline import Ingress
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from tests.support.sinks import RecordingSink


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("delay_second", attr.DELAY_SECONDS),
        ("fifo_sq", attr.FIFO_SEQ),
        ("Dedup_Key", attr.DEDUP_KEY),
        ("dedupkey", attr.DEDUP_KEY),
        ("fifo-group", attr.FIFO_GROUP),
        ("deliverAt", attr.DELIVER_AT),
        ("FIFO_END", attr.FIFO_END),
    ],
)
def test_a_near_miss_is_named_with_the_name_it_meant(name: str, meant: str) -> None:
    assert attr.near_misses({name: "1", "customer": "c-17"}) == {name: meant}


@pytest.mark.parametrize(
    "attributes",
    [
        {attr.DEDUP_KEY: "k", attr.FIFO_GROUP: "g", attr.FIFO_SEQ: "1"},
        {"customer": "c", "order_id": "7", "region": "eu", "fifo": "x", "delay": "5"},
        {attr.ORIGIN_MESSAGE_ID: "1", attr.FIFO_FILLER: "true", "googclient_traceparent": "x"},
    ],
)
def test_exact_and_unrelated_names_are_not_near_misses(attributes: dict[str, str]) -> None:
    assert attr.near_misses(attributes) == {}


def test_ingress_warns_about_a_near_miss_and_still_delivers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ingress = Ingress(
        store=MemoryDedupStore(),
        sink=RecordingSink(),
        final_topic="projects/p/topics/final",
        dead_letter_topic="projects/p/topics/dlq",
        lease=timedelta(minutes=1),
        ttl=timedelta(days=8),
    )
    with caplog.at_level(logging.WARNING, logger="pubsub_toolkit"):
        result = ingress.handle(Message(b"x", {"delay_second": "60"}, message_id="m1"))
    assert result.outcome.value == "published"  # at once: the toolkit reads delay_seconds only
    warned = [r.getMessage() for r in caplog.records if "delay_second" in r.getMessage()]
    assert warned and "delay_seconds" in warned[0], warned
