"""A workflow whose middle stage runs out of GPU memory once, for clearing it as a user does.

prep >> train >> evaluate, each stage appending a line to a file of its own in
``params.dir`` every time a rank executes it. ``air_repair`` runs on ``databricks_default``;
``air_repair_refused`` on ``air_refusing``, a workspace that refuses to repair runs.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG
from airflow_air.operators import AirRunOperator
from airflow_air.workflow import AirWorkflowTaskGroup

START = pendulum.datetime(2025, 1, 1, tz="UTC")
OOM = "torch.OutOfMemoryError: CUDA out of memory"


def _workload(stage: str, *, fail_first: bool = False) -> dict:
    path = f'"{{{{ params.dir }}}}/{stage}"'
    command = f"n=$(cat {path} 2>/dev/null | wc -l); echo run >> {path}"
    if fail_first:
        command += f'; if [ "$n" -eq 0 ]; then echo "{OOM}" >&2; exit 1; fi'
    return {
        "experiment_name": stage,
        "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
        "max_retries": 0,
        "command": f"{command}; echo {stage} done",
    }


for dag_id, conn_id in (
    ("air_repair", "databricks_default"),
    ("air_repair_refused", "air_refusing"),
):
    with (
        DAG(
            dag_id,
            schedule=None,
            start_date=START,
            catchup=False,
            tags=["e2e"],
            params={"dir": "/nonexistent"},
        ),
        AirWorkflowTaskGroup("pipeline", run_name=dag_id, databricks_conn_id=conn_id),
    ):
        prep = AirRunOperator(
            task_id="prep", workload=_workload("prep"), databricks_conn_id=conn_id
        )
        train = AirRunOperator(
            task_id="train",
            workload=_workload("train", fail_first=True),
            databricks_conn_id=conn_id,
        )
        evaluate = AirRunOperator(
            task_id="evaluate", workload=_workload("evaluate"), databricks_conn_id=conn_id
        )
        prep >> train >> evaluate

# Two stages in parallel, both failing once, cleared together: one repair of both.
with (
    DAG(
        "air_repair_parallel",
        schedule=None,
        start_date=START,
        catchup=False,
        tags=["e2e"],
        params={"dir": "/nonexistent"},
    ),
    AirWorkflowTaskGroup("pipeline", run_name="air_repair_parallel"),
):
    prep = AirRunOperator(task_id="prep", workload=_workload("prep"))
    train_a = AirRunOperator(task_id="train_a", workload=_workload("train_a", fail_first=True))
    train_b = AirRunOperator(task_id="train_b", workload=_workload("train_b", fail_first=True))
    evaluate = AirRunOperator(task_id="evaluate", workload=_workload("evaluate"))
    prep >> [train_a, train_b] >> evaluate
