"""Counters shared across processes: the ingress instances flush, the dashboard reads.

Ingress counts its decisions in memory (:class:`~pubsub_toolkit.observability.Metrics`); a
:class:`~.flusher.CounterFlusher` thread adds the *deltas* to a :class:`~.store.StatsStore` every
few seconds, off the message path. One module per backend, like the dedup stores: memory (tests),
Redis (``HINCRBY`` on one hash) and Firestore (one document per instance, summed by the reader,
so no document is written more than once per flush interval).
"""
