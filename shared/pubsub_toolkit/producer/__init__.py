"""The producer side: :class:`~.publisher.Publisher` stamps the contract's attributes (and FIFO
numbers from a sequence counter) and publishes through a :class:`~.sink.MessageSink`."""
