"""How often a run is asked about: one rule for the client's wait and the watcher.

While a run waits for GPU capacity, polls space out by half again each time, up to six
times the base interval (capacity waits last minutes to hours); any other state polls at
the base interval. Every pause is jittered by ±10% so that many waiters do not poll in
step.
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


def jittered(seconds: float, rng: random.Random) -> float:
    return seconds * rng.uniform(1 - JITTER, 1 + JITTER)
