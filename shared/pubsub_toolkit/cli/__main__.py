"""`python -m pubsub_toolkit.cli`: the same as the `pubsub-toolkit` command."""

import sys

from pubsub_toolkit.cli import main

sys.exit(main())
