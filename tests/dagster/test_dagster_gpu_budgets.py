"""Budgets: a remote run whose GPU-hours (accelerators x elapsed, every attempt) pass the
asset's or a stage's ``max_gpu_hours`` is cancelled, and the step fails saying so, without
a retry."""

from __future__ import annotations

import re

import dagster as dg
from dagster_checks import failure_data

from air_runtime import AirClient, RunState
from air_runtime.local import LocalWorkspace
from dagster_air import AirStage, AirWorkspace, build_air_assets

# 8 accelerators pass 0.001 GPU-hours within half a second of running.
WORKLOAD = {
    "experiment_name": "over_budget",
    "compute": {"accelerator_type": "GPU_8xH100", "num_accelerators": 8},
    "max_retries": 0,
    "command": "echo started; sleep 600",
}


def _ended(local_workspace: LocalWorkspace, run_id: int) -> RunState:
    with AirClient(local_workspace.host, local_workspace.token) as client:
        return client.wait(run_id, timeout=60)


def test_an_asset_over_its_gpu_hours_is_cancelled_and_its_step_fails(
    air_workspace: AirWorkspace, instance: dg.DagsterInstance, local_workspace: LocalWorkspace
) -> None:
    assets = build_air_assets(
        AirStage(key="over_budget", workload=WORKLOAD),
        max_gpu_hours=0.001,
        retry_policy=dg.RetryPolicy(max_retries=2),
    )
    result = dg.materialize(
        [assets], resources={"air_workspace": air_workspace}, instance=instance,
        raise_on_error=False,
    )  # fmt: skip
    assert not result.success
    message = failure_data(result).error.message
    found = re.search(
        r"run (\d+) used (0\.\d+) GPU-hours, over its budget of 0\.001 \(max_gpu_hours\); "
        r"cancelled",
        message,
    )
    assert found, message
    state = _ended(local_workspace, int(found.group(1)))
    assert state.result_state == "CANCELED", state
    assert state.gpu_hours() < 0.02, state.gpu_hours()  # stopped within a few polls
    # Not retried: a retry would spend as much again.
    assert local_workspace.admin.counters()["runs_created"] == 1
    assert not result.asset_materializations_for_node("over_budget")


def test_a_stage_over_its_gpu_hours_cancels_its_run(
    air_workspace: AirWorkspace, instance: dg.DagsterInstance, local_workspace: LocalWorkspace
) -> None:
    assets = build_air_assets(
        [
            AirStage(
                key="train",
                workload={**WORKLOAD, "experiment_name": "train"},
                max_gpu_hours=0.001,
            ),
            AirStage(
                key="evaluate",
                workload={**WORKLOAD, "experiment_name": "evaluate", "command": "true"},
                depends_on=["train"],
            ),
        ],
        name="budgeted_pipeline",
        max_gpu_hours=100,  # the run's own budget is far off
    )
    result = dg.materialize(
        [assets], resources={"air_workspace": air_workspace}, instance=instance,
        raise_on_error=False,
    )  # fmt: skip
    assert not result.success
    message = failure_data(result).error.message
    found = re.search(
        r"stage train of run (\d+) used 0\.\d+ GPU-hours, over its budget of 0\.001 "
        r"\(max_gpu_hours\); cancelled",
        message,
    )
    assert found, message
    state = _ended(local_workspace, int(found.group(1)))
    assert state.result_state == "CANCELED", state
    assert state.gpu_hours("train") < 0.02, state.gpu_hours("train")
    assert not result.asset_materializations_for_node("budgeted_pipeline")
