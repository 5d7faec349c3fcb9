"""The core: every decision of the three guarantees, with no I/O.

Pure functions over values, and protocol code that *yields* the effects it needs (read a
state, compare-and-set, park, call the handler, dead-letter, publish, schedule) and receives
their results - the sans-I/O style of h11. The drivers (the sync and asyncio runtime, and the
simulation) perform the effects; no decision is written in a driver. The core imports only the
standard library and the contract (``tests/unit/test_core_without_dependencies.py`` imports it
in a bare venv; ``[tool.importlinter]`` in pyproject.toml keeps it below every layer with I/O).
"""
