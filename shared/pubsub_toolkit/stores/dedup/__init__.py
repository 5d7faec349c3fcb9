"""Dedup stores: :mod:`.base` (the protocol and its records), :mod:`.rules` (the claim rules
every backend applies, as pure functions), :mod:`.memory`, :mod:`.redis`, :mod:`.firestore`."""
