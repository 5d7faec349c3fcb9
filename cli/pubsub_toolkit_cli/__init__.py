"""What operators use, as the ``pubsub-toolkit-cli`` distribution beside the library: the
``pubsub-toolkit`` command (:mod:`.cli`), the status page (:mod:`.dashboard`), per-group FIFO
status (:mod:`.group_status`), trace trees (:mod:`.trace_tree`), and the workarounds for the
local emulators they need - a unary-pull subscriber (:mod:`.unary_pull`) and Pub/Sub clients
that carry 10 MB messages (:mod:`.emulator`). It depends on :mod:`pubsub_toolkit`; the library
never imports it, and no deployed bundle carries it."""
