"""The pluggable stores, one subpackage per kind and one module per backend.

Each kind has a ``base`` module (the protocol and its values) and ``memory``, ``redis`` and
``firestore`` backends: :mod:`.dedup` (dedup records), :mod:`.fifo_state` (the FIFO gate's
per-group state), :mod:`.counters` (FIFO sequence numbers) and :mod:`.stats` (the dashboard's
shared counters). :mod:`.factory` builds them on the configured backend, importing only the one
selected; the Redis backends need the ``redis`` extra.
"""
