"""Deduplication: the idempotent-consumer logic over a dedup store.

* :mod:`.idempotent` - :class:`~.idempotent.IdempotentProcessor`: claim a key, run the effect
  once, remember its result;
* :mod:`.inbox` - the handler's Firestore writes and the dedup marker in one transaction.

The stores themselves, and the claim rules every backend applies (pure functions,
:mod:`pubsub_toolkit.stores.dedup.rules`), are below this package in :mod:`pubsub_toolkit.stores`.
"""
