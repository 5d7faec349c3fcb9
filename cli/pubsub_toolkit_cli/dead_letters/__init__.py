"""The dead-letter topic for operators: :mod:`.listing` (what is there and why, consuming
nothing: ``dlq list``, the status page's count) and :mod:`.replay` (back to origin, in FIFO
order: ``dlq replay``). Sending a dead letter, and the mark that makes a replay unforgeable,
are the library's (:mod:`pubsub_toolkit.dead_letters`): a deployment runs them."""
