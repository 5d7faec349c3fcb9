"""How a command ends: its exit status and the one line on stderr that says why.

* **0**: done.
* **1**: the operation ran and failed - a Google API call refused or failed, a store error, a
  group or part not found, the local stack not answering.
* **2**: the command cannot run as given - a bad or missing option (argparse), a refused
  combination of options, a missing or invalid setting (``GOOGLE_CLOUD_PROJECT`` ...), no
  credentials, or an optional part whose extra is not installed (the line names the
  ``pip install 'pubsub-toolkit[EXTRA]'`` to run). Fix the command or the setup, then run it again.

No traceback in either case: one line, ``pubsub-toolkit: error: ...``.
"""

from __future__ import annotations

import sys

from pubsub_toolkit.errors import ConfigurationError, ToolkitError

EXIT_FAILED = 1
EXIT_USAGE = 2

# Top-level modules that only an extra brings, and that extra (pyproject.toml). A command that
# reaches one without its extra ends with the pip line instead of a traceback.
EXTRA_OF = {
    "flask": "dashboard",
    "werkzeug": "dashboard",
    "redis": "redis",
    "google.cloud.tasks": "tasks",
    "google.cloud.tasks_v2": "tasks",
    "google.cloud.secretmanager": "secrets",
    "opentelemetry.exporter.cloud_trace": "tracing",
    "opentelemetry.exporter.otlp": "otlp",
    "functions_framework": "functions",
}


class UsageError(ConfigurationError):
    """The options, taken together, cannot run (e.g. `dlq replay` with nothing selected)."""


def extra_for(module: str | None) -> str | None:
    """The extra that brings ``module`` (or a module inside it); None for any other."""
    name = module or ""
    for top, extra in EXTRA_OF.items():
        if name == top or name.startswith(top + "."):
            return extra
    return None


def fail(message: str, code: int) -> int:
    """Print ``message`` as the command's one error line; return ``code``."""
    print(f"pubsub-toolkit: error: {' '.join(message.split())}", file=sys.stderr)
    return code


def missing_extra(command: str, exc: ModuleNotFoundError) -> int:
    """The line for an optional module that is not installed (re-raised if not an extra's)."""
    extra = extra_for(exc.name)
    if extra is None:
        raise exc
    return fail(f"{command} needs {exc.name}: pip install 'pubsub-toolkit[{extra}]'", EXIT_USAGE)


def toolkit_error(exc: ToolkitError) -> int:
    """Exit 2 for a setting, an extra or options that cannot work; 1 for a failed operation."""
    return fail(str(exc), EXIT_USAGE if isinstance(exc, ConfigurationError) else EXIT_FAILED)
