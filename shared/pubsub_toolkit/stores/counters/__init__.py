"""FIFO sequence counters: :mod:`.base` (the protocol), :mod:`.memory`, :mod:`.redis`,
:mod:`.firestore`."""
