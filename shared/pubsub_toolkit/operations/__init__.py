"""What operators use: the ``pubsub-toolkit`` CLI (:mod:`.cli`), the status page
(:mod:`.dashboard`), per-group FIFO status (:mod:`.group_status`) and the shared counters'
flusher (:mod:`.stats`)."""
