"""Backends: one object per storage service, making every store the toolkit needs on one client.

:mod:`.base` is the protocol; :mod:`.memory`, :mod:`.redis` and :mod:`.firestore` the backends
(the Redis one needs the ``redis`` extra, imported only when a Redis backend is made).
:func:`pubsub_toolkit.stores.factory.backend_from_settings` picks one from settings.
"""
