"""Queue policies as frozen values: retry/backoff, rate limits, and the token bucket.

Each policy is read from the queue's protobuf once (defaults filled, values validated) and written
back normalised, so GetQueue shows what the emulator actually applies - as Cloud Tasks does when
it "picks the default" for an unset field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeAlias

from .errors import invalid_argument

Pb: TypeAlias = Any
"""A raw protobuf message (google-cloud-tasks builds these at runtime; they have no stubs)."""

# Cloud Tasks' documented defaults and limits.
DEFAULT_MAX_ATTEMPTS = 100
DEFAULT_MIN_BACKOFF = timedelta(seconds=0.1)
DEFAULT_MAX_BACKOFF = timedelta(hours=1)
DEFAULT_MAX_DOUBLINGS = 16
DEFAULT_MAX_DISPATCHES_PER_SECOND = 500.0
MAX_DISPATCHES_PER_SECOND = 500.0
DEFAULT_MAX_CONCURRENT_DISPATCHES = 1000
MAX_CONCURRENT_DISPATCHES = 5000
MAX_BURST_SIZE = 100


@dataclass(frozen=True)
class RetryPolicy:
    """When a failed attempt is retried, and when the task is given up (and deleted)."""

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    min_backoff: timedelta = DEFAULT_MIN_BACKOFF
    max_backoff: timedelta = DEFAULT_MAX_BACKOFF
    max_doublings: int = DEFAULT_MAX_DOUBLINGS
    max_retry_duration: timedelta = timedelta(0)

    @classmethod
    def from_pb(cls, pb: Pb, fallback: RetryPolicy | None = None) -> RetryPolicy:
        """Read a ``RetryConfig``; unset fields come from ``fallback`` (or the defaults).

        Proto3 cannot tell 0 from unset for integers, so ``max_attempts == 0`` and
        ``max_doublings == 0`` mean "unset", as in Cloud Tasks.
        """
        base = fallback or cls()
        policy = cls(
            max_attempts=pb.max_attempts or base.max_attempts,
            min_backoff=_duration(pb, "min_backoff", base.min_backoff),
            max_backoff=_duration(pb, "max_backoff", base.max_backoff),
            max_doublings=pb.max_doublings or base.max_doublings,
            max_retry_duration=_duration(pb, "max_retry_duration", base.max_retry_duration),
        )
        if policy.max_attempts < -1:
            raise invalid_argument("retry_config.max_attempts must be >= -1")
        if policy.max_doublings < 0:
            raise invalid_argument("retry_config.max_doublings must be >= 0")
        if policy.min_backoff < timedelta(0) or policy.max_retry_duration < timedelta(0):
            raise invalid_argument("retry_config durations must not be negative")
        if policy.max_backoff < policy.min_backoff:
            raise invalid_argument("retry_config.max_backoff must be >= min_backoff")
        return policy

    def fill_pb(self, pb: Pb) -> None:
        """Write the policy into a ``RetryConfig`` message."""
        pb.max_attempts = self.max_attempts
        pb.min_backoff.FromTimedelta(self.min_backoff)
        pb.max_backoff.FromTimedelta(self.max_backoff)
        pb.max_doublings = self.max_doublings
        pb.max_retry_duration.FromTimedelta(self.max_retry_duration)

    def backoff(self, failures: int) -> timedelta:
        """Delay before the next attempt after ``failures`` failed attempts (>= 1).

        The interval starts at min_backoff, doubles max_doublings times, then grows linearly by
        the last doubled step, capped at max_backoff (10s/300s/3 -> 10, 20, 40, 80, 160, 240,
        300, 300 ... as documented for ``RetryConfig.max_doublings``).
        """
        step = max(failures, 1) - 1
        if step <= self.max_doublings:
            delay = self.min_backoff * (1 << step)
        else:
            delay = self.min_backoff * (1 << self.max_doublings) * (1 + step - self.max_doublings)
        return min(delay, self.max_backoff)

    def exhausted(self, attempts: int, first_attempt: datetime, now: datetime) -> bool:
        """True when no further attempt may be made.

        Retrying stops only once *both* limits that are set have been reached; with neither set
        (max_attempts -1, max_retry_duration 0) the task is retried forever.
        """
        limit_attempts = self.max_attempts >= 0
        limit_age = self.max_retry_duration > timedelta(0)
        if not (limit_attempts or limit_age):
            return False
        attempts_done = not limit_attempts or attempts >= self.max_attempts
        age_done = not limit_age or now - first_attempt >= self.max_retry_duration
        return attempts_done and age_done


@dataclass(frozen=True)
class RateLimitPolicy:
    """How fast, and how many at once, a queue dispatches."""

    max_dispatches_per_second: float = DEFAULT_MAX_DISPATCHES_PER_SECOND
    max_concurrent_dispatches: int = DEFAULT_MAX_CONCURRENT_DISPATCHES

    @property
    def max_burst_size(self) -> int:
        """Token bucket size. Cloud Tasks picks it "at least equal to max_dispatches_per_second"
        (100 for the default 500/s); the emulator uses ceil(rate), between 1 and 100."""
        return min(MAX_BURST_SIZE, max(1, math.ceil(self.max_dispatches_per_second)))

    @classmethod
    def from_pb(cls, pb: Pb) -> RateLimitPolicy:
        """Read a ``RateLimits``; 0 means unset (the default)."""
        rate = pb.max_dispatches_per_second or DEFAULT_MAX_DISPATCHES_PER_SECOND
        concurrency = pb.max_concurrent_dispatches or DEFAULT_MAX_CONCURRENT_DISPATCHES
        if not 0 < rate <= MAX_DISPATCHES_PER_SECOND or math.isnan(rate):
            raise invalid_argument(
                f"rate_limits.max_dispatches_per_second must be in (0, {MAX_DISPATCHES_PER_SECOND}]"
            )
        if not 0 < concurrency <= MAX_CONCURRENT_DISPATCHES:
            raise invalid_argument(
                f"rate_limits.max_concurrent_dispatches must be in [1, {MAX_CONCURRENT_DISPATCHES}]"
            )
        return cls(float(rate), int(concurrency))

    def fill_pb(self, pb: Pb) -> None:
        """Write the policy (and the derived, output-only burst size) into ``RateLimits``."""
        pb.max_dispatches_per_second = self.max_dispatches_per_second
        pb.max_concurrent_dispatches = self.max_concurrent_dispatches
        pb.max_burst_size = self.max_burst_size


class TokenBucket:
    """The queue's dispatch-rate limiter: ``burst`` tokens, refilled at ``rate`` per second.

    Times are monotonic seconds supplied by the caller, so the bucket itself never reads a clock.
    Not thread-safe: the emulator calls it under its state lock.
    """

    _EPSILON = 1e-9  # float refill arithmetic must not leave a bucket at 0.9999999 forever

    def __init__(self, rate: float, burst: int, now: float) -> None:
        self._rate = rate
        self._burst = float(burst)
        self._tokens = float(burst)  # a new queue may dispatch a full burst at once
        self._stamp = now

    def reconfigure(self, rate: float, burst: int, now: float) -> None:
        """Apply new limits, keeping the tokens earned so far (up to the new burst size)."""
        self._refill(now)
        self._rate = rate
        self._burst = float(burst)
        self._tokens = min(self._tokens, self._burst)

    def take(self, now: float) -> float:
        """Take a token and return 0.0, or return the seconds until one will be available."""
        self._refill(now)
        if self._tokens >= 1.0 - self._EPSILON:
            self._tokens = max(0.0, self._tokens - 1.0)
            return 0.0
        return (1.0 - self._tokens) / self._rate

    def _refill(self, now: float) -> None:
        elapsed = max(0.0, now - self._stamp)
        self._tokens = min(self._burst, self._tokens + elapsed * self._rate)
        self._stamp = now


def _duration(pb: Pb, field: str, default: timedelta) -> timedelta:
    if not pb.HasField(field):
        return default
    value: timedelta = getattr(pb, field).ToTimedelta()
    return value
