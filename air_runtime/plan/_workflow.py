"""The rules of a multi-stage run: task keys, ``run_if`` values, dependencies without cycles."""

from __future__ import annotations

import re
from collections.abc import Sequence

from air_runtime._errors import Problem, WorkloadError
from air_runtime.plan._models import Stage
from air_runtime.platform import MAX_TASK_KEY_LENGTH, TASK_KEY_CHARACTERS, TASK_KEY_RE
from air_runtime.workload import Workload

RUN_IF_VALUES = (
    "ALL_SUCCESS", "AT_LEAST_ONE_SUCCESS", "NONE_FAILED", "ALL_DONE",
    "AT_LEAST_ONE_FAILED", "ALL_FAILED",
)  # fmt: skip
TASK_KEY_HINT = f"use 1-{MAX_TASK_KEY_LENGTH} characters of A-Z a-z 0-9 _ -"
_TASK_KEY_FORBIDDEN = re.compile(f"[^{TASK_KEY_CHARACTERS}]")


def task_key_problem(key: object, path: str) -> Problem | None:
    """Why ``key`` cannot be a task key (the Jobs API's rule), or None."""
    if isinstance(key, str) and TASK_KEY_RE.match(key):
        return None
    return Problem(path, f"task_key {key!r} is invalid", TASK_KEY_HINT)


def task_key_for(name: str) -> str:
    """A task key made from ``name`` (an orchestrator's task id): each character a task key
    cannot hold becomes '_', and the key is cut at its length limit."""
    return _TASK_KEY_FORBIDDEN.sub("_", name)[:MAX_TASK_KEY_LENGTH]


def check_stages(stages: Sequence[Stage]) -> None:
    problems: list[Problem] = []
    if not stages:
        raise WorkloadError(
            [
                Problem(
                    "stages", "a workflow needs at least one stage", "pass one Stage per workload"
                )
            ]
        )
    keys: dict[str, int] = {}
    for i, stage in enumerate(stages):
        path = f"stages[{i}]"
        if not isinstance(stage, Stage) or not isinstance(stage.workload, Workload):
            problems.append(
                Problem(
                    path, f"{path} is not a Stage with a Workload", "use Stage(task_key, workload)"
                )
            )
            continue
        key_problem = task_key_problem(stage.task_key, f"{path}.task_key")
        if key_problem is not None:
            problems.append(key_problem)
        elif stage.task_key in keys:
            problems.append(
                Problem(
                    f"{path}.task_key",
                    f"task_key {stage.task_key!r} is already used by stages[{keys[stage.task_key]}]",
                    "give every stage a unique task_key",
                )
            )
        else:
            keys[stage.task_key] = i
        if stage.run_if not in RUN_IF_VALUES:
            problems.append(
                Problem(
                    f"{path}.run_if",
                    f"unknown run_if {stage.run_if!r}",
                    f"one of {', '.join(RUN_IF_VALUES)}",
                )
            )
    if problems:
        raise WorkloadError(problems)
    for i, stage in enumerate(stages):
        for dep in stage.depends_on:
            if dep not in keys:
                problems.append(
                    Problem(
                        f"stages[{i}].depends_on",
                        f"stage {stage.task_key!r} depends on unknown stage {dep!r}",
                        f"known stages: {', '.join(keys)}",
                    )
                )
            elif dep == stage.task_key:
                problems.append(
                    Problem(
                        f"stages[{i}].depends_on",
                        f"stage {stage.task_key!r} depends on itself",
                        "remove it from depends_on",
                    )
                )
    if problems:
        raise WorkloadError(problems)
    # Kahn's algorithm: whatever cannot be ordered is on a cycle.
    remaining = {s.task_key: set(s.depends_on) for s in stages}
    while True:
        ready = [k for k, deps in remaining.items() if not deps]
        if not ready:
            break
        for key in ready:
            del remaining[key]
        for deps in remaining.values():
            deps.difference_update(ready)
    if remaining:
        raise WorkloadError(
            [
                Problem(
                    "stages",
                    f"the stages {', '.join(sorted(remaining))} depend on each other in a cycle",
                    "remove one of the depends_on entries of the cycle",
                )
            ]
        )
