"""How often a run is asked about: one rule for the client's wait and the watcher.

While a run waits for GPU capacity, polls space out by half again each time, up to six
times the base interval (capacity waits last minutes to hours); any other state polls at
the base interval. Every pause is jittered by ±10% so that many waiters do not poll in
step.

A run just started is looked at more often: its pause is a fifth of its age, at least
``YOUNG_MIN_INTERVAL`` and at most the base interval (1 s for its first 5 s, the base 5 s from
25 s on). A run of a few seconds is then seen ended within about a second of its end rather
than up to an interval later, for about eight more requests per run; the watcher applies it
while it asks runs one by one, not to its coalesced listings (many runs).
"""

from __future__ import annotations

import random

from air_runtime._states import RunState

CAPACITY_BACKOFF_FACTOR = 1.5
CAPACITY_MAX_FACTOR = 6.0
JITTER = 0.1


def next_interval(current: float, base: float, state: RunState) -> float:
    """The interval after ``state`` was seen, polling every ``current`` seconds so far."""
    if state.is_waiting_for_capacity:
        return min(current * CAPACITY_BACKOFF_FACTOR, base * CAPACITY_MAX_FACTOR)
    return base


YOUNG_MIN_INTERVAL = 1.0
YOUNG_FRACTION = 0.2


def young_interval(interval: float, age: float) -> float:
    """``interval`` for a run watched for ``age`` seconds (see the module docstring)."""
    return min(interval, max(YOUNG_MIN_INTERVAL, age * YOUNG_FRACTION))


def jittered(seconds: float, rng: random.Random) -> float:
    return seconds * rng.uniform(1 - JITTER, 1 + JITTER)
