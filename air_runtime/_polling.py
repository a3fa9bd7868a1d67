"""How often a run is asked about, and the one deadline loop, for the client's wait and
the watcher.

While a run waits for GPU capacity, polls space out by half again each time, up to six
times the base interval (capacity waits last minutes to hours); any other state polls at
the base interval. Every pause is jittered by ±10% so that many waiters do not poll in
step.

A run just started is looked at more often: its pause is a fifth of its age, at least
``YOUNG_MIN_INTERVAL`` and at most the base interval (1 s for its first 5 s, the base 5 s from
25 s on). A run of a few seconds is then seen ended about a second after its end (P10, one
event loop: p99 0.94 s alone, 1.09 s in a 50-trial sweep) rather than up to an interval later, for about eight more requests per run; the watcher applies it
while it asks runs one by one, not to its coalesced listings (many runs).

A workspace that answered and goes away (an outage, a restart) is waited out, never taken for
a failed wait: the runs exist (their ids prove the host was right) and keep going without us.
``unreachable_cause`` tells an error that means "nobody answered" (a transport error, no
answer within ``UNANSWERED_AFTER_S``, a 5xx after the client's own retries, a host that never
answered this process) from an answer that means something (401, 404, 429, a capacity
refusal). While the workspace is down one probe asks for everyone, ``PROBE_FIRST_S`` after the
failure, doubling up to ``PROBE_MAX_S``: 10 s, so that once the workspace is back it is seen
within about 11 s and each run's end one sweep later (a sweep of 1,000 runs at the default 10
requests/s takes a few seconds), within the 30 s the waiters are promised, for about one
request every 10-20 s however long the outage.
"""

from __future__ import annotations

import errno
import logging
import random
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

from air_runtime._diagnosis import Diagnosis
from air_runtime._errors import (
    BudgetExceeded,
    CapacityError,
    InvalidResponse,
    PlatformError,
    RateLimited,
    RetriesStopped,
    RunTimeout,
    WorkspaceUnreachable,
)
from air_runtime._failure_policy import FailurePolicy, RetryDecision
from air_runtime._states import RunState, TaskState
from air_runtime._sweeps import Sweep, SweepSpend, spent_error

if TYPE_CHECKING:
    from air_runtime._wait_policy import WaitPolicy

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


# --- a workspace that stops answering -----------------------------------------------------

# A request of the watcher with no answer for this long counts as the workspace gone (the
# API answers in well under a second; the client's own retries of a 5xx or a dropped
# connection fit in it).
UNANSWERED_AFTER_S = 10.0
PROBE_FIRST_S = 1.0
PROBE_MAX_S = 10.0


def probe_pause(probes_failed: int) -> float:
    """Seconds before the next probe of a workspace that did not answer ``probes_failed``
    probes (0: the first probe after the failure)."""
    return min(PROBE_FIRST_S * 2**probes_failed, PROBE_MAX_S)


def unreachable_cause(error: BaseException) -> str | None:
    """Why nobody answered, when ``error`` says so (see the module docstring); None when
    the workspace answered (the error means what it says)."""
    if isinstance(error, TimeoutError):
        return f"no answer within {UNANSWERED_AFTER_S:g} s"
    if isinstance(error, httpx.TransportError):
        return _transport_cause(error)
    if isinstance(error, RateLimited | CapacityError):
        return None  # an answer: the workspace is there and says "later"
    if isinstance(error, InvalidResponse):
        return "answer cut short" if error.truncated else None
    if isinstance(error, WorkspaceUnreachable):
        return _UNREACHABLE_CAUSES.get(error.cause, error.cause)
    if isinstance(error, PlatformError):
        if error.status_code is None:  # "could not reach <host> (<httpx error>: ...)"
            context = error.__cause__ or error.__context__
            if isinstance(context, httpx.TransportError):
                return _transport_cause(context)
            return _cause_in_text(str(error))
        if error.status_code >= 500:
            return f"HTTP {error.status_code}"
    return None


def _transport_cause(error: httpx.TransportError) -> str:
    if isinstance(error, httpx.ConnectTimeout):
        return "connect timeout"
    if isinstance(error, httpx.TimeoutException):
        return "no answer"
    if isinstance(error, httpx.RemoteProtocolError):
        return "connection closed without an answer"
    if isinstance(error, httpx.ConnectError):
        seen: BaseException | None = error
        for _ in range(8):  # httpx -> httpcore -> OSError
            if seen is None:
                break
            if isinstance(seen, ConnectionRefusedError) or (
                isinstance(seen, OSError) and seen.errno == errno.ECONNREFUSED
            ):
                return "connection refused"
            seen = seen.__cause__ or seen.__context__
        text = str(error).lower()
        if "refused" in text:
            return "connection refused"
        if "name or service" in text or "nodename" in text or "resolution" in text:
            return "name not resolved"
        return "cannot connect"
    if isinstance(error, httpx.NetworkError):
        return "connection lost"
    return type(error).__name__


# WorkspaceUnreachable.cause in the words of the other causes.
_UNREACHABLE_CAUSES = {
    "dns": "name not resolved",
    "refused": "connection refused",
    "tls": "TLS handshake failed",
    "connection": "cannot connect",
}

_CAUSES_BY_NAME = (
    ("ConnectTimeout", "connect timeout"),
    ("RemoteProtocolError", "connection closed without an answer"),
    ("Timeout", "no answer"),
    ("refused", "connection refused"),
    ("ConnectError", "cannot connect"),
    ("ReadError", "connection lost"),
    ("WriteError", "connection lost"),
)


def _cause_in_text(text: str) -> str:
    """The cause in the client's "could not reach" message, which names the transport error."""
    for name, cause in _CAUSES_BY_NAME:
        if name in text:
            return cause
    return "no connection"


def workspace_name(host: str) -> str:
    """The host as a message names it: no scheme, never a ``user:password@`` part."""
    parts = urlsplit(host if "://" in host else f"https://{host}")
    return parts.netloc.rpartition("@")[2] or host


def utc_text(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@dataclass(frozen=True, slots=True)
class WorkspaceNotice:
    """What a waiter hears when its workspace stops answering (``reachable`` False), and
    once more when it answers again. ``since`` is the wall-clock time the first unanswered
    request was sent; ``down_s`` how long it was down (when reachable again)."""

    host: str
    reachable: bool
    since: float
    cause: str
    down_s: float = 0.0

    @property
    def message(self) -> str:
        if self.reachable:
            return f"workspace {self.host} reachable again after {self.down_s:.0f} s"
        return (
            f"workspace {self.host} unreachable since {utc_text(self.since)} ({self.cause}); "
            "runs keep going, waiting"
        )


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
class Tally:
    """Send what the ``sweep`` spent (a ``SweepSpend`` of a fresh listing)."""

    sweep: Sweep


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
    there would cancel its other tasks for nothing; so is a run being cancelled (a wait after
    a cancel only waits for the end)."""
    if state.has_ended(task_key) or state.life_cycle_state == "TERMINATING":
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
    state: RunState, decision: RetryDecision, task_key: str | None = None
) -> RetriesStopped | None:
    """The error that stops a run's further retries when the policy's decision says so."""
    if not decision.stops:
        return None
    return RetriesStopped(
        state.run_id,
        decision.line(),
        task_key=task_key,
        failure_class=decision.failure_class.value,
        action=decision.action.value,
    )


def retry_examined(
    policy: FailurePolicy,
    state: RunState,
    diagnosis: Diagnosis | None,
    task_key: str | None,
    on_retry: Callable[[RetryDecision], None] | None,
) -> RetriesStopped | None:
    """The policy's decision on one failed attempt: the error that ends the wait when the
    platform's retry is not what it gets (its message says why), else told to ``on_retry``
    (its line goes to the task log)."""
    decision = policy.decide(diagnosis)
    stopped = retries_stopped(state, decision, task_key)
    if stopped is None:
        tell_retry(on_retry, decision, state.run_id)
    return stopped


def tell_retry(
    on_retry: Callable[[RetryDecision], None] | None, decision: RetryDecision, run_id: int
) -> None:
    if on_retry is None:
        return
    try:
        on_retry(decision)
    except Exception:
        logger.exception("on_retry callback for run %s failed", run_id)


def retried_attempts(
    state: RunState, task_key: str | None, examined: set[tuple[str, int]]
) -> list[TaskState]:
    """The attempts that failed and were retried (a later attempt of their task exists),
    not examined yet; each is marked examined. A run that ended between two polls had its
    retries unseen: its log still tells what each failed attempt was."""
    attempts = state.task_attempts(task_key)
    found = []
    for attempt in attempts:
        key = (attempt.task_key, attempt.attempt_number)
        if key in examined or not attempt.is_terminal or attempt.is_success:
            continue
        if any(
            a.task_key == attempt.task_key and a.attempt_number > attempt.attempt_number
            for a in attempts
        ):
            examined.add(key)
            found.append(attempt)
    return found


def until_ended(
    run_id: int,
    wait: WaitPolicy,
    *,
    poll_interval: float,
    rng: random.Random,
    on_update: Callable[[RunState], None] | None = None,
    on_retry: Callable[[RetryDecision], None] | None = None,
) -> Generator[Pause | Examine | Tally | None, Any, RunState]:
    """The one wait on a run (or, with the policy's ``task_key``, on one of its tasks: a
    stage ends before its run does). It yields ``None`` to be sent the run's current state
    and a ``Pause`` to be slept; it returns the state that shows the end. Past the policy's
    deadline (``WaitPolicy.ends_by``, asked once, at the start), ``RunTimeout`` (the run
    itself is left alone). ``on_update`` sees each change of state once. Past
    a budget (``WaitPolicy.over_budget``), ``BudgetExceeded`` (the run is left alone: the
    caller cancels it). Each attempt that failed while a retry follows is yielded as an
    ``Examine`` (send its diagnosis) when the ``failure_policy`` needs it or ``on_retry``
    listens; the policy's decision goes to ``on_retry``, and one that is not the platform's
    retry raises ``RetriesStopped`` (the run is left alone: the caller cancels it). With a
    ``sweep``, each round also asks what the sweep spent (a ``Tally``): once its budget is
    spent, ``SweepBudgetSpent`` (the caller cancels the run and the sweep's others); the pause
    never outlasts the moment the budget is spent at the pace of the runs going.

    The client's ``wait`` drives it with requests and sleeps of its driver, the watcher's
    stage wait with its request budget; neither has a loop of its own."""
    deadline = wait.ends_by()
    task_key, sweep = wait.task_key, wait.sweep
    interval = poll_interval
    seen: tuple[Any, ...] | None = None
    warned_unknown = False
    examined: set[tuple[str, int]] = set()
    policy = wait.failure_policy
    examines = policy.examines or on_retry is not None
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
            if on_retry is not None:
                for attempt in retried_attempts(state, task_key, examined):
                    decision = policy.decide((yield Examine(state, attempt)))
                    tell_retry(on_retry, decision, run_id)
            return state
        exceeded = wait.over_budget(state)
        if exceeded is not None:
            raise exceeded
        spend: SweepSpend | None = None
        if sweep is not None:
            spend = yield Tally(sweep)
            assert spend is not None
            spent = spent_error(spend, run_id, task_key)
            if spent is not None:
                raise spent
        if examines:
            for attempt in attempts_to_examine(state, task_key, examined):
                diagnosis = yield Examine(state, attempt)
                stopped = retry_examined(policy, state, diagnosis, task_key, on_retry)
                if stopped is not None:
                    raise stopped
        interval = next_interval(interval, poll_interval, state)
        pause = jittered(interval, rng)
        if spend is not None:
            pause = min(pause, max(spend.seconds_to_spent(), YOUNG_MIN_INTERVAL / 10))
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
