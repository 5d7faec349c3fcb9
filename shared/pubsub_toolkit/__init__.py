"""pubsub_toolkit: deduplication, delayed delivery and FIFO per group for Google Cloud Pub/Sub.

The public surface, importable from here:

```python
from pubsub_toolkit import idempotent                   # dedup for code you already have
from pubsub_toolkit import Publisher, PubSubSink        # publish, numbered per FIFO group
from pubsub_toolkit import Consumer, MessageProcessor   # consume: dedup + FIFO gate
from pubsub_toolkit import RedisBackend, Settings       # every store on one client
```

* publishing: :class:`Publisher`, :class:`PubSubSink`;
* consuming: :func:`idempotent` (a decorator for a functions-framework function or a
  subscriber callback), :class:`Consumer` (streaming pull, groups in parallel),
  :class:`MessageProcessor` and :class:`IdempotentProcessor` for a loop of your own,
  :class:`Message` (what a handler receives); an ``async def`` handler works with the same
  names (``idempotent``, ``MessageProcessor.from_settings``, ``Consumer``);
* stores: :class:`RedisBackend`, :class:`FirestoreBackend`, :class:`MemoryBackend` - each
  makes the dedup store, FIFO state, sequence counter and stats store on one client;
* settings: :class:`Settings` and :class:`ConsumerSettings`, in code or ``from_env()``;
* errors a handler raises or a caller catches: :class:`PermanentError` (dead-letter, ack),
  :class:`TransientError` (redeliver), :class:`RetryLater` (deliver again after a delay of
  your choice), :class:`ConfigurationError` (a bad setting, named).

For what the top level leaves out, a few modules are public too, each for the names the Python
API reference lists: :mod:`pubsub_toolkit.delay.cancel` and
:mod:`pubsub_toolkit.delay.scheduler` (cancel a delayed message),
:mod:`pubsub_toolkit.stores.factory` (stores from settings), :mod:`pubsub_toolkit.consumer.gate`,
:mod:`pubsub_toolkit.dedup.idempotent` and :mod:`pubsub_toolkit.dedup.inbox` (a consumer loop of
your own), :mod:`pubsub_toolkit.attributes` (the attribute contract),
:mod:`pubsub_toolkit.errors` (every error), :mod:`pubsub_toolkit.config` (``DelaySettings``,
for ``Settings(delay=...)`` in code) and :mod:`pubsub_toolkit.metrics`. Everything else is
internal and may move. Names load on first use (PEP 562), so ``import pubsub_toolkit`` - which
every submodule import runs first - costs nothing and never needs an extra.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# name -> the module that defines it
_EXPORTS = {
    "idempotent": "pubsub_toolkit.decorators",
    "Publisher": "pubsub_toolkit.producer.publisher",
    "PubSubSink": "pubsub_toolkit.producer.sink",
    "Consumer": "pubsub_toolkit.consumer.subscriber",
    "MessageProcessor": "pubsub_toolkit.consumer.processor",
    "IdempotentProcessor": "pubsub_toolkit.dedup.idempotent",
    "Message": "pubsub_toolkit.message",
    "RedisBackend": "pubsub_toolkit.stores.backends.redis",
    "FirestoreBackend": "pubsub_toolkit.stores.backends.firestore",
    "MemoryBackend": "pubsub_toolkit.stores.backends.memory",
    "Settings": "pubsub_toolkit.config",
    "ConsumerSettings": "pubsub_toolkit.config",
    "PermanentError": "pubsub_toolkit.errors",
    "TransientError": "pubsub_toolkit.errors",
    "RetryLater": "pubsub_toolkit.errors",
    "ConfigurationError": "pubsub_toolkit.errors",
}

__all__ = [
    "ConfigurationError",
    "Consumer",
    "ConsumerSettings",
    "FirestoreBackend",
    "IdempotentProcessor",
    "MemoryBackend",
    "Message",
    "MessageProcessor",
    "PermanentError",
    "PubSubSink",
    "Publisher",
    "RedisBackend",
    "RetryLater",
    "Settings",
    "TransientError",
    "__version__",
    "idempotent",
]

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ loads them
    from pubsub_toolkit.config import ConsumerSettings, Settings
    from pubsub_toolkit.consumer.processor import MessageProcessor
    from pubsub_toolkit.consumer.subscriber import Consumer
    from pubsub_toolkit.decorators import idempotent
    from pubsub_toolkit.dedup.idempotent import IdempotentProcessor
    from pubsub_toolkit.errors import (
        ConfigurationError,
        PermanentError,
        RetryLater,
        TransientError,
    )
    from pubsub_toolkit.message import Message
    from pubsub_toolkit.producer.publisher import Publisher
    from pubsub_toolkit.producer.sink import PubSubSink
    from pubsub_toolkit.stores.backends.firestore import FirestoreBackend
    from pubsub_toolkit.stores.backends.memory import MemoryBackend
    from pubsub_toolkit.stores.backends.redis import RedisBackend


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
