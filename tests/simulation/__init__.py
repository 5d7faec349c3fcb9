"""A deterministic simulation of the whole pipeline under faults (issue 11, "Build" 1-3, 5).

The real library code - ``Publisher`` and its counter, ``Ingress``, ``Relay`` and ``cancel``,
``MessageProcessor`` with ``FifoGate`` and ``IdempotentProcessor``, and the in-memory stores'
logic - runs single-threaded on one virtual clock, driven by one seeded ``random.Random``.
Only *our own* protocols are implemented here (``MessageSink``, the scheduler, ``DedupStore``,
``FifoStore``, ``SequenceCounter``, ``Clock``), by models of the services behind them:

* :mod:`.pubsub` - topics and subscriptions: at-least-once, delays, reordering, duplicates,
  lost acks, nack backoff, dead-lettering after N delivery attempts;
* :mod:`.tasks` - Cloud Tasks: named tasks, at-least-once execution, retries, duplicates;
* :mod:`.database` - one "Redis" holding the three memory stores, with outages, timeouts after
  commit and rollbacks;
* :mod:`.process` - component instances that crash at any boundary and restart fresh.

:mod:`.world` wires one schedule, :mod:`.invariants` checks the guarantee of DESIGN.md after
it, :mod:`.runner` runs many (``make sim``). See ``tests/simulation/README.md``.
"""
