"""Dedup stores: :mod:`.base` (the protocol), :mod:`.memory`, :mod:`.redis`, :mod:`.firestore`."""
