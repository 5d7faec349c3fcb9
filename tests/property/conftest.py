"""Hypothesis settings for the property suite: bounded, deterministic, no example database.

``derandomize=True`` makes every run draw the same examples (CI-stable); ``database=None`` keeps
no state between runs; ``deadline=None`` because a slow CI core is not a bug. Select another
profile with ``--hypothesis-profile`` (e.g. ``thorough`` for a longer local hunt).
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "thorough", parent=settings.get_profile("ci"), max_examples=5000, derandomize=False
)
settings.load_profile("ci")
