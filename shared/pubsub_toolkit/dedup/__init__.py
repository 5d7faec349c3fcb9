"""Deduplication: the idempotent-consumer logic over a dedup store.

* :mod:`.idempotent` - :class:`~.idempotent.IdempotentProcessor`: claim a key, run the effect
  once, remember its result;
* :mod:`.rules` - the claim rules every store backend applies, as pure functions;
* :mod:`.inbox` - the handler's Firestore writes and the dedup marker in one transaction.

The stores themselves are in :mod:`pubsub_toolkit.stores.dedup`.
"""
