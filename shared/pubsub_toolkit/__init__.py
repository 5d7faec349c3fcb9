"""pubsub_toolkit: deduplication, delayed delivery and FIFO per group for Google Cloud Pub/Sub.

See the repository README for the design; the attribute contract lives in
:mod:`pubsub_toolkit.attributes`.
"""

__version__ = "0.1.0"
