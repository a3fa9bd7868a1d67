"""Dags of the redaction campaign (S7): a failing workload that prints an Airflow secret,
waited on in the worker, in the triggerer, and as stages of a workflow run."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG
from airflow_air.operators import AirRunOperator
from airflow_air.workflow import AirWorkflowTaskGroup

START = pendulum.datetime(2026, 1, 1, tz="UTC")
SECRET_ENV = {"HF_TOKEN": "conn:redaction_secret:password"}


def workload(name: str) -> dict:
    return {
        "experiment_name": name,
        "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
        "max_retries": 0,
        "command": "{{ params.command }}",
    }


def single_dag(dag_id: str, **operator_kwargs) -> DAG:
    with DAG(dag_id, schedule=None, start_date=START, params={"command": "exit 1"}) as dag:
        AirRunOperator(
            task_id="run",
            workload=workload(dag_id),
            poll_interval=0.2,
            secret_env=SECRET_ENV,
            secret_scope="redaction",
            **operator_kwargs,
        )
    return dag


redaction_sync_dag = single_dag("redaction_sync", deferrable=False, stream_logs=True)
redaction_deferred_dag = single_dag("redaction_deferred", deferrable=True)

with (
    DAG(
        "redaction_workflow", schedule=None, start_date=START, params={"command": "exit 1"}
    ) as redaction_workflow_dag,
    AirWorkflowTaskGroup("pipeline", run_name="redaction_workflow"),
):
    # Two independent stages (both fail): one waits in the worker, one in the triggerer.
    for stage_id, deferrable in (("stage_sync", False), ("stage_deferred", True)):
        AirRunOperator(
            task_id=stage_id,
            workload=workload(stage_id),
            poll_interval=0.2,
            secret_env=SECRET_ENV,
            secret_scope="redaction",
            deferrable=deferrable,
        )
