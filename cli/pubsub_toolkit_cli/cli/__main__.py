"""`python -m pubsub_toolkit_cli.cli`: the same as the `pubsub-toolkit` command."""

import sys

from pubsub_toolkit_cli.cli import main

sys.exit(main())
