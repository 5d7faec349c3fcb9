"""``python -m pubsub_toolkit_local.tasks_emulator``: see :mod:`.cli`."""

from .cli import main

raise SystemExit(main())
