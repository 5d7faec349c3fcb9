"""Optional dependencies: imported where they are used, with the extra to install when absent.

The core needs google-cloud-pubsub and google-cloud-firestore only. Redis, Cloud Tasks, Flask and
requests come with the extras named in pyproject.toml; a module that needs one imports it
through :func:`import_optional` at the point of use, so ``import pubsub_toolkit`` (and every
public module) works without them and a missing one is a MissingDependencyError that says
``pip install 'pubsub-toolkit[EXTRA]'``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from pubsub_toolkit.errors import MissingDependencyError


def import_optional(module: str, *, extra: str, needed_by: str) -> ModuleType:
    """``module``, or MissingDependencyError naming what needs it and the extra that brings it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f"{needed_by} needs {module}: pip install 'pubsub-toolkit[{extra}]'"
        ) from exc
