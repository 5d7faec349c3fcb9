"""The consumer side: one message through dedup or the FIFO gate, then the handler.

* :mod:`.subscriber` - :class:`~.subscriber.Consumer`, a streaming-pull subscriber;
* :mod:`.processor` - :class:`~.processor.MessageProcessor`, the guarantees for one message
  (also what the consumer Cloud Function runs);
* :mod:`.convoy` - each FIFO group serially, different groups in parallel;
* :mod:`.gate` - :class:`~.gate.FifoGate`, each group in ``fifo_seq`` order, once: the sync
  driver of :mod:`pubsub_toolkit.core.fifo_gate` (every decision, as generators of effects);
  :mod:`.gate_async` its asyncio driver.
"""
