"""Counters shared across processes (the ingress instances flush, the dashboard reads):
:mod:`.base` (the protocol), :mod:`.memory`, :mod:`.redis` (``HINCRBY`` on one hash),
:mod:`.firestore` (one document per writing instance, summed by the reader)."""
