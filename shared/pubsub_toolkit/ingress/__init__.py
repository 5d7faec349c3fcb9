"""Ingress: the function on the origin topic that validates, deduplicates and routes.

:mod:`.pipeline` is the logic (:class:`~.pipeline.Ingress`), :mod:`.outcomes` what it reports;
``functions/ingress/main.py`` is the Cloud Function around it.
"""
