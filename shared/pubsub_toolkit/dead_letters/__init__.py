"""Dead letters at run time: :mod:`.send` (with a reason, nothing lost) and :mod:`.replay` (the
mark that makes a replay id unforgeable, which ingress checks). Listing and replaying the
dead-letter topic are the operator's, in the CLI distribution."""
