"""`python -m pubsub_toolkit.operations.cli`: the same as the `pubsub-toolkit` command."""

import sys

from pubsub_toolkit.operations.cli import main

sys.exit(main())
