"""How often a run is asked about, and the one deadline loop, for the client's wait and
the watcher.

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

import logging
import random
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from air_runtime._diagnosis import Diagnosis
from air_runtime._errors import BudgetExceeded, RetriesStopped, RunTimeout
from air_runtime._states import RunState, TaskState

logger = logging.getLogger("air_runtime.client")

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


# --- the deadline loop of every wait on a run ---------------------------------------------


def over_budget(
    state: RunState, max_gpu_hours: float | None, task_key: str | None = None
) -> BudgetExceeded | None:
    """The error of a run (or stage) still going whose GPU-hours, attempts still running
    counted up to now, passed ``max_gpu_hours``; None within it, ended, or without one.
    Computed from a state already read: a budget costs no request."""
    if max_gpu_hours is None or state.has_ended(task_key):
        return None
    used = state.gpu_hours(task_key, now_ms=int(time.time() * 1000))
    if used <= max_gpu_hours:
        return None
    return BudgetExceeded(state.run_id, used, max_gpu_hours, task_key=task_key)


@dataclass(frozen=True, slots=True)
class Pause:
    """Sleep this long, then send ``None``: the loop asks for the run's state again."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Examine:
    """Send the ``Diagnosis`` of this ended attempt (None when nothing says why)."""

    state: RunState
    attempt: TaskState


def attempts_to_examine(
    state: RunState, task_key: str | None, examined: set[tuple[str, int]]
) -> list[TaskState]:
    """The attempts (of the run, or of the stage ``task_key``) that failed while the run
    goes on and that the platform will retry (retries left), not examined yet; each is
    marked examined. A task out of retries is left to the run's end: stopping the run
    there would cancel its other tasks for nothing."""
    if state.has_ended(task_key):
        return []
    found = []
    for attempt in state.task_attempts(task_key):
        key = (attempt.task_key, attempt.attempt_number)
        if key in examined or not attempt.is_terminal or attempt.is_success:
            continue
        retries = attempt.max_retries
        if retries is not None and 0 <= retries <= attempt.attempt_number:
            continue
        examined.add(key)
        found.append(attempt)
    return found


def retries_stopped(
    state: RunState, diagnosis: Diagnosis | None, task_key: str | None = None
) -> RetriesStopped | None:
    """The error that stops a run's further retries: only a deterministic diagnosis."""
    if diagnosis is None or not diagnosis.deterministic:
        return None
    return RetriesStopped(state.run_id, diagnosis.headline(), task_key=task_key)


def until_ended(
    run_id: int,
    *,
    poll_interval: float,
    rng: random.Random,
    task_key: str | None = None,
    deadline: float | None = None,
    timeout: float | None = None,
    on_update: Callable[[RunState], None] | None = None,
    max_gpu_hours: float | None = None,
    stop_deterministic_retries: bool = False,
) -> Generator[Pause | Examine | None, Any, RunState]:
    """The one wait on a run (or, with ``task_key``, on one of its tasks: a stage ends before
    its run does). It yields ``None`` to be sent the run's current state and a ``Pause`` to
    be slept; it returns the state that shows the end. ``deadline`` is a wall-clock time
    (``time.time()``, so it survives serialization) and ``timeout`` seconds from the first
    request; past the earlier, ``RunTimeout`` (the run itself is left alone). ``on_update``
    sees each change of state once. Past ``max_gpu_hours`` (``over_budget``),
    ``BudgetExceeded`` (the run is left alone: the caller cancels it). With
    ``stop_deterministic_retries``, each attempt that failed while a retry follows is
    yielded as an ``Examine`` (send its diagnosis); a deterministic one raises
    ``RetriesStopped`` (the run is left alone: the caller cancels it).

    The client's ``wait`` drives it with requests and sleeps of its driver, the watcher's
    stage wait with its request budget; neither has a loop of its own."""
    if timeout is not None:
        deadline = min(d for d in (deadline, time.time() + timeout) if d is not None)
    interval = poll_interval
    seen: tuple[Any, ...] | None = None
    warned_unknown = False
    examined: set[tuple[str, int]] = set()
    what = f"stage {task_key} of run {run_id}" if task_key else f"run {run_id}"
    while True:
        state = yield None
        assert state is not None
        task = state.task(task_key) if task_key is not None else None
        key: tuple[Any, ...] = (state.life_cycle_state, state.result_state, state.state_message)
        if task is not None:
            key += (task.life_cycle_state, task.result_state, task.state_message)
        if key != seen:
            seen = key
            if state.unknown_state and not warned_unknown:
                warned_unknown = True
                logger.warning(
                    "run %s is in state %s, unknown to this version; still waiting",
                    run_id,
                    state.life_cycle_state,
                )
            if on_update is not None:
                on_update(state)
        if state.has_ended(task_key):
            return state
        exceeded = over_budget(state, max_gpu_hours, task_key)
        if exceeded is not None:
            raise exceeded
        if stop_deterministic_retries:
            for attempt in attempts_to_examine(state, task_key, examined):
                stopped = retries_stopped(state, (yield Examine(state, attempt)), task_key)
                if stopped is not None:
                    raise stopped
        interval = next_interval(interval, poll_interval, state)
        pause = jittered(interval, rng)
        if deadline is not None:
            remaining = deadline - time.time()
            if remaining <= 0:
                raise RunTimeout(
                    f"{what} is still {state.describe()} at the deadline; it keeps running "
                    "on the workspace unless cancelled",
                    run_id=run_id,
                )
            pause = min(pause, remaining)
        yield Pause(pause)
