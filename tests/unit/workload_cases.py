"""Shared workload fixtures for the unit tests."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from air_runtime._errors import Problem, WorkloadError
from air_runtime.workload import load_workload

MINIMAL: dict[str, Any] = {
    "experiment_name": "exp",
    "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
    "command": "echo hi",
}


def minimal(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(MINIMAL)
    for key, value in changes.items():
        if value is ...:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def problems_of(source: Any, overrides: Any = None) -> list[Problem]:
    with pytest.raises(WorkloadError) as info:
        load_workload(source, overrides)
    assert info.value.problems, "a WorkloadError always lists at least one problem"
    return info.value.problems


def only_problem(source: Any, overrides: Any = None) -> Problem:
    problems = problems_of(source, overrides)
    assert len(problems) == 1, [str(p) for p in problems]
    return problems[0]
