"""The message value every part of the toolkit passes around, independent of any client library."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType


@dataclass(frozen=True)
class Message:
    """A Pub/Sub message as received: payload, attributes and the broker's provenance."""

    data: bytes
    attributes: Mapping[str, str] = field(default_factory=dict)
    message_id: str = ""
    publish_time: datetime | None = None
    ordering_key: str = ""

    def __post_init__(self) -> None:
        # Freeze the attributes so a Message can be shared between threads safely.
        object.__setattr__(self, "attributes", MappingProxyType(dict(self.attributes)))

    @property
    def dedup_key(self) -> str:
        """The message's stable key: its ``dedup_key`` attribute (ingress stamps one on every
        message, the producer's own or the origin message id), else its message id. Pass it
        downstream (e.g. as an ``Idempotency-Key`` header) so the next service deduplicates too.
        """
        return self.attributes.get("dedup_key") or self.message_id


@dataclass(frozen=True)
class OutboundMessage:
    """A message to publish: payload, attributes and (for FIFO groups) the ordering key."""

    data: bytes
    attributes: Mapping[str, str] = field(default_factory=dict)
    ordering_key: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "attributes", MappingProxyType(dict(self.attributes)))
