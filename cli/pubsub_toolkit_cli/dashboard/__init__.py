"""The read-only status page: ``pubsub-toolkit dashboard``.

* :mod:`.snapshot` - the frozen values and :func:`~.snapshot.gather` (``status`` uses it too);
* :mod:`.sources` - the live clients a snapshot is read from, built once from the environment;
* :mod:`.render` - the HTML (escaped, inline CSS, stable ids for tests);
* :mod:`.app` - a small Flask app serving ``/``, ``/panel`` and ``/status.json``.
"""
