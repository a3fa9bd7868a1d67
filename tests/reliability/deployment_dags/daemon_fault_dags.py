"""Dags of the reliability campaigns that run in a real Airflow deployment (scheduler,
LocalExecutor, triggerer) rather than ``dag.test()``; the command comes from params."""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG
from airflow_air.operators import AirRunOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")


def single_dag(dag_id: str, **operator_kwargs) -> DAG:
    workload = {
        "experiment_name": dag_id,
        "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
        "max_retries": 0,
        "command": "{{ params.command }}",
    }
    with DAG(dag_id, schedule=None, start_date=START, params={"command": "echo ok"}) as dag:
        AirRunOperator(task_id="run", workload=workload, poll_interval=1, **operator_kwargs)
    return dag


# A try whose task process dies is retried; the retry must reattach to the same run.
sigkill_dag = single_dag(
    "daemon_task_sigkill", deferrable=True, retries=2, retry_delay=timedelta(seconds=1)
)
# No retries: a wait that does not survive a triggerer restart fails the Dag run.
deferred_dag = single_dag("daemon_deferred", deferrable=True)
sync_dag = single_dag("daemon_sync", deferrable=False, stream_logs=False)
# The secret comes from the hf_default connection of every Airflow process.
secrets_dag = single_dag(
    "daemon_secrets",
    deferrable=True,
    secret_env={"HF_TOKEN": "conn:hf_default:password"},
    secret_scope="daemon",
)


def failover_dag(dag_id: str) -> DAG:
    """A deferred task and a deferred workflow stage, each waiting on a run of its own."""
    from airflow_air.workflow import AirWorkflowTaskGroup

    def workload(name: str) -> dict:
        return {
            "experiment_name": f"{dag_id}_{name}",
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
            "max_retries": 0,
            "command": "{{ params.command }}",
        }

    with DAG(dag_id, schedule=None, start_date=START, params={"command": "echo ok"}) as dag:
        AirRunOperator(task_id="run", workload=workload("run"), poll_interval=1, deferrable=True)
        with AirWorkflowTaskGroup("flow", run_name=f"{dag_id}_flow"):
            AirRunOperator(
                task_id="train", workload=workload("train"), poll_interval=1, deferrable=True
            )
    return dag


# Its triggers are handed to another triggerer while they wait; nothing may be cancelled.
failover = failover_dag("daemon_failover")
