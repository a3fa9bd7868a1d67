"""What ends a wait on a run besides the run's own end: one frozen value that every wait takes
(the clients', the watcher's, the Airflow trigger's, the Dagster step's) and a trigger
serializes whole.

The listeners of a wait (``on_update``, ``on_lines``, ``on_retry``...) are not part of it:
they are callables of the process that waits, never stored.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from air_runtime._errors import BudgetExceeded
from air_runtime._failure_policy import FailurePolicy
from air_runtime._polling import over_budget
from air_runtime._states import RunState
from air_runtime._sweeps import Sweep


@dataclass(frozen=True)
class WaitPolicy:
    """What a wait on a run watches for.

    - ``task_key``: wait for this task (a workflow stage) of a multi-task run, which ends
      before its run does; None: the whole run.
    - ``deadline`` (wall clock, ``time.time()``, so it survives serialization) and
      ``timeout`` (seconds from the wait's start): past the earlier, ``RunTimeout``; the run
      goes on.
    - ``max_gpu_hours``: the run's (the stage's) GPU-hour budget; past it,
      ``BudgetExceeded``; the run goes on until the caller cancels it.
    - ``task_budgets``: GPU-hour budgets of tasks of a multi-task run (a Dagster step's
      stages, its partitions' tasks) while the wait is on the whole run; past one,
      ``BudgetExceeded`` naming the task (the caller cancels the run: the platform cancels
      runs, not tasks).
    - ``failure_policy``: what an attempt that failed while the platform retries it gets
      (``FailurePolicy``; the default stops deterministic failures): one the platform does
      not retry ends the wait with ``RetriesStopped``.
    - ``sweep``: the sweep whose GPU-hour budget the run shares; once spent,
      ``SweepBudgetSpent``.
    """

    task_key: str | None = None
    deadline: float | None = None
    timeout: float | None = None
    max_gpu_hours: float | None = None
    task_budgets: Mapping[str, float] = field(default_factory=dict)
    failure_policy: FailurePolicy = field(default_factory=FailurePolicy)
    sweep: Sweep | None = None

    @classmethod
    def until_end(cls, timeout: float | None = None) -> WaitPolicy:
        """Only the run's end (and ``timeout``): the waits our own code makes after a cancel
        or for a run whose tasks ended, which decide nothing about its failures."""
        return cls(timeout=timeout, failure_policy=FailurePolicy.platform_only())

    @classmethod
    def of(cls, policy: WaitPolicy | None = None, /, **options: Any) -> WaitPolicy:
        """``policy`` (the default when None) with ``options`` (its field names) in place;
        ``failure_policy`` may be a mapping as in YAML, and ``stop_deterministic_retries``
        (deprecated) sets the failure policy's deterministic action."""
        stop = options.pop("stop_deterministic_retries", None)
        base = policy if policy is not None else cls()
        if "failure_policy" in options or stop is not None:
            chosen = options.get("failure_policy", base.failure_policy)
            options["failure_policy"] = FailurePolicy.of(chosen, stop)
        return dataclasses.replace(base, **options) if options else base

    def ends_by(self) -> float | None:
        """The wall-clock moment the wait gives up (the earlier of ``deadline`` and
        ``timeout`` from now), to be asked once, when the wait starts."""
        ends = [] if self.deadline is None else [self.deadline]
        if self.timeout is not None:
            ends.append(time.time() + self.timeout)
        return min(ends) if ends else None

    @property
    def has_budget(self) -> bool:
        """Whether the wait counts GPU-hours (of the run, its stage or its tasks)."""
        return self.max_gpu_hours is not None or bool(self.task_budgets)

    def over_budget(self, state: RunState) -> BudgetExceeded | None:
        """The first budget ``state`` shows passed (the run's or stage's, then each task's
        still going), computed from a state already read: a budget costs no request."""
        exceeded = over_budget(state, self.max_gpu_hours, self.task_key)
        for key, hours in self.task_budgets.items():
            if exceeded is not None:
                break
            exceeded = over_budget(state, hours, key)
        return exceeded

    def to_json(self) -> dict[str, Any]:
        return {
            "task_key": self.task_key,
            "deadline": self.deadline,
            "timeout": self.timeout,
            "max_gpu_hours": self.max_gpu_hours,
            "task_budgets": dict(self.task_budgets),
            "failure_policy": self.failure_policy.to_json(),
            "sweep": self.sweep.to_json() if self.sweep is not None else None,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> WaitPolicy:
        """A stored policy: ``to_json``'s, or the flat trigger kwargs an earlier version
        stored (the same keys, ``timeout`` aside); a missing key reads as its default, an
        unknown one is ignored."""
        deadline, timeout, budget = (
            raw.get("deadline"),
            raw.get("timeout"),
            raw.get("max_gpu_hours"),
        )
        sweep = raw.get("sweep")
        return cls(
            task_key=raw.get("task_key"),
            deadline=None if deadline is None else float(deadline),
            timeout=None if timeout is None else float(timeout),
            max_gpu_hours=None if budget is None else float(budget),
            task_budgets={str(k): float(v) for k, v in (raw.get("task_budgets") or {}).items()},
            failure_policy=FailurePolicy.of(raw.get("failure_policy") or None),
            sweep=Sweep.from_json(sweep) if sweep else None,
        )
