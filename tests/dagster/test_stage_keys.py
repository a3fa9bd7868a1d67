"""Stage keys follow the plan's task-key rule at definition time (`dg check defs`), not
mid-run: one rule, in the core."""

from __future__ import annotations

import dagster as dg
import pytest

from air_runtime.plan import TASK_KEY_HINT
from dagster_air import AirStage

WORKLOAD = {
    "experiment_name": "exp",
    "command": "echo hi",
    "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
}


@pytest.mark.parametrize("key", ["trainé", "", "a" * 101, "has space", "dot.ted"])
def test_keys_the_jobs_api_refuses_are_refused_when_defined(key: str) -> None:
    with pytest.raises(dg.DagsterInvalidDefinitionError, match=TASK_KEY_HINT):
        AirStage(key=key, workload=WORKLOAD)


@pytest.mark.parametrize("key", ["train", "a" * 100, "rl-stage_2"])
def test_valid_keys(key: str) -> None:
    assert AirStage(key=key, workload=WORKLOAD).key == key
