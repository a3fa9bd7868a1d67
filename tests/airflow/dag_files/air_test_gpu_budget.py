"""Runs that keep going until their GPU-hours pass ``max_gpu_hours`` (0.001 GPU-hours: 8
accelerators pass it within half a second of running): one waits in the worker, one in the
triggerer; and a workflow stage with a budget of its own. test_airflow_gpu_budget.py reads
how they ended."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG
from airflow_air.operators import AirRunOperator
from airflow_air.workflow import AirWorkflowTaskGroup

WORKLOAD = {
    "experiment_name": "over_budget",
    "compute": {"accelerator_type": "GPU_8xH100", "num_accelerators": 8},
    "max_retries": 0,
    "command": "echo started; sleep 600",
}

with DAG(
    "air_test_gpu_budget",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
) as gpu_budget_dag:
    for deferrable in (False, True):
        AirRunOperator(
            task_id="deferred" if deferrable else "in_worker",
            workload=WORKLOAD,
            max_gpu_hours=0.001,
            deferrable=deferrable,
            poll_interval=0.2,
        )

with (
    DAG(
        "air_test_stage_gpu_budget",
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    ) as stage_gpu_budget_dag,
    AirWorkflowTaskGroup("pipeline", run_name="stage_budget"),
):
    # The stage waits in the triggerer on its own task's GPU-hours.
    AirRunOperator(
        task_id="train",
        workload={**WORKLOAD, "experiment_name": "train"},
        max_gpu_hours=0.001,
        deferrable=True,
        poll_interval=0.2,
    )
