"""Dead letters: :mod:`.send` (with a reason, nothing lost), :mod:`.listing` (what is there and
why) and :mod:`.replay` (back to origin, in FIFO order, with unforgeable replay ids)."""
