"""pubsub_toolkit: deduplication, delayed delivery and FIFO per group for Google Cloud Pub/Sub.

The public surface, importable from here::

    from pubsub_toolkit import Consumer, MessageProcessor, Publisher, Settings

Names load on first use (PEP 562), so ``import pubsub_toolkit`` - which every submodule import
runs first - costs nothing and never needs an extra. The packages, by role: ``producer``,
``ingress``, ``delay``, ``consumer``, ``dedup``, ``dead_letters``, ``operations`` and
``stores`` (one subpackage per pluggable kind); the attribute contract is
:mod:`pubsub_toolkit.attributes`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# name -> the module that defines it
_EXPORTS = {
    "Publisher": "pubsub_toolkit.producer.publisher",
    "PubSubSink": "pubsub_toolkit.producer.sink",
    "Consumer": "pubsub_toolkit.consumer.subscriber",
    "MessageProcessor": "pubsub_toolkit.consumer.processor",
    "FifoGate": "pubsub_toolkit.consumer.gate",
    "GatePolicy": "pubsub_toolkit.consumer.gate_rules",
    "IdempotentProcessor": "pubsub_toolkit.dedup.idempotent",
    "idempotent": "pubsub_toolkit.decorators",
    "Message": "pubsub_toolkit.message",
    "OutboundMessage": "pubsub_toolkit.message",
    "Settings": "pubsub_toolkit.config",
    "ConsumerSettings": "pubsub_toolkit.config",
    "ToolkitError": "pubsub_toolkit.errors",
    "ConfigurationError": "pubsub_toolkit.errors",
    "MissingDependencyError": "pubsub_toolkit.errors",
    "PermanentError": "pubsub_toolkit.errors",
    "ContractViolation": "pubsub_toolkit.errors",
    "TransientError": "pubsub_toolkit.errors",
    "StoreUnavailableError": "pubsub_toolkit.errors",
}

__all__ = [
    "ConfigurationError",
    "Consumer",
    "ConsumerSettings",
    "ContractViolation",
    "FifoGate",
    "GatePolicy",
    "IdempotentProcessor",
    "Message",
    "MessageProcessor",
    "MissingDependencyError",
    "OutboundMessage",
    "PermanentError",
    "PubSubSink",
    "Publisher",
    "Settings",
    "StoreUnavailableError",
    "ToolkitError",
    "TransientError",
    "__version__",
    "idempotent",
]

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ loads them
    from pubsub_toolkit.config import ConsumerSettings, Settings
    from pubsub_toolkit.consumer.gate import FifoGate
    from pubsub_toolkit.consumer.gate_rules import GatePolicy
    from pubsub_toolkit.consumer.processor import MessageProcessor
    from pubsub_toolkit.consumer.subscriber import Consumer
    from pubsub_toolkit.decorators import idempotent
    from pubsub_toolkit.dedup.idempotent import IdempotentProcessor
    from pubsub_toolkit.errors import (
        ConfigurationError,
        ContractViolation,
        MissingDependencyError,
        PermanentError,
        StoreUnavailableError,
        ToolkitError,
        TransientError,
    )
    from pubsub_toolkit.message import Message, OutboundMessage
    from pubsub_toolkit.producer.publisher import Publisher
    from pubsub_toolkit.producer.sink import PubSubSink


def __getattr__(name: str) -> Any:
    """Load a public name from its module the first time it is asked for."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pubsub_toolkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
