"""FIFO gate state stores: :mod:`.base` (GroupState and the protocol), :mod:`.memory`,
:mod:`.redis`, :mod:`.firestore`."""
