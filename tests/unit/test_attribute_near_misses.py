"""A producer's attribute that looks like a mistyped toolkit attribute is named, with the name
it probably meant, at ingress.

Found by a new user publishing by hand from a foreign client: ``delay_second`` (for
``delay_seconds``) delivered the message at once, ``fifo_sq`` and ``Dedup_Key`` passed as
business attributes - the toolkit reads only its exact names, and nothing said so. (Ingress's
WARNING: tests/unit/test_ingress.py.)
"""

from __future__ import annotations

import pytest

from pubsub_toolkit import attributes as attr


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
