"""Ingress: the function on the origin topic that validates, deduplicates and routes.

:mod:`.pipeline` performs it (:class:`~.pipeline.Ingress`), as :mod:`pubsub_toolkit.core.ingress`
decides (and there is what it reports); ``functions/ingress/main.py`` is the Cloud Function
around it.
"""
