"""Encoding of dedup records for key-value backends (Redis): compact JSON, times in microseconds."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from json.encoder import encode_basestring_ascii as _quote  # the C escaper json.dumps uses

from pubsub_toolkit.stores.dedup.base import DedupRecord, RecordState

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# One encoder for every record: json.dumps with non-default separators builds a new
# JSONEncoder on every call, which costs more client CPU than the encoding itself.
_ENCODER = json.JSONEncoder(separators=(",", ":"))


def to_micros(value: datetime) -> int:
    """Microseconds since the epoch, exact (no float rounding)."""
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(value: int) -> datetime:
    """The UTC datetime ``value`` microseconds after the epoch."""
    return datetime.fromtimestamp(value // 1_000_000, UTC).replace(microsecond=value % 1_000_000)


def encode(record: DedupRecord) -> str:
    """The record as compact JSON (the layout every Redis store and script reads).

    Byte for byte what ``json.dumps(..., separators=(",", ":"))`` writes, assembled with
    json's own C string escaper: the encoder object's Python layers (and the C encoder it
    builds on every call) cost more client CPU than the record's few fields. A field of an
    unexpected type (a non-str result, say) goes through the JSON encoder as before.
    """
    result = record.result
    namespace, key, fingerprint = record.namespace, record.key, record.fingerprint
    token = record.token
    if (
        type(namespace) is str
        and type(key) is str
        and type(fingerprint) is str
        and type(token) is int
        and (result is None or type(result) is str)
    ):
        lease = record.lease_until
        return (
            f'{{"ns":{_quote(namespace)},"k":{_quote(key)},"s":{_quote(record.state.value)},'
            f'"t":{token},"f":{_quote(fingerprint)},'
            f'"l":{"null" if lease is None else to_micros(lease)},'
            f'"e":{to_micros(record.expire_at)},'
            f'"r":{"null" if result is None else _quote(result)}}}'
        )
    return _encode_any(record)


def _encode_any(record: DedupRecord) -> str:
    return _ENCODER.encode(
        {
            "ns": record.namespace,
            "k": record.key,
            "s": record.state.value,
            "t": record.token,
            "f": record.fingerprint,
            "l": None if record.lease_until is None else to_micros(record.lease_until),
            "e": to_micros(record.expire_at),
            "r": record.result,
        },
    )


def decode(raw: str | bytes) -> DedupRecord:
    """The record that :func:`encode` wrote."""
    doc = json.loads(raw)
    return DedupRecord(
        namespace=doc["ns"],
        key=doc["k"],
        state=RecordState(doc["s"]),
        token=int(doc["t"]),
        fingerprint=doc["f"],
        lease_until=None if doc["l"] is None else from_micros(int(doc["l"])),
        expire_at=from_micros(int(doc["e"])),
        result=doc["r"],
    )
