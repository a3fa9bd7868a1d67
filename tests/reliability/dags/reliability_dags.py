"""Dags of the reliability campaigns (the command comes from params, so one Dag serves
succeeding, failing and long-running workloads)."""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG
from airflow_air.operators import AirRunOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")


def workload(name: str) -> dict:
    return {
        "experiment_name": name,
        "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
        "max_retries": 0,
        "command": "{{ params.command }}",
    }


def single_dag(dag_id: str, **operator_kwargs) -> DAG:
    with DAG(dag_id, schedule=None, start_date=START, params={"command": "echo ok"}) as dag:
        AirRunOperator(
            task_id="run", workload=workload(dag_id), poll_interval=0.2, **operator_kwargs
        )
    return dag


sync_dag = single_dag("reliability_sync", deferrable=False, stream_logs=False)
deferred_dag = single_dag("reliability_deferred", deferrable=True)
retry_dag = single_dag(
    "reliability_retry", deferrable=False, retries=2, retry_delay=timedelta(0), stream_logs=False
)
sync_timeout_dag = single_dag(
    "reliability_sync_timeout",
    deferrable=False,
    stream_logs=False,
    execution_timeout=timedelta(seconds=10),
)
deferred_timeout_dag = single_dag(
    "reliability_deferred_timeout", deferrable=True, execution_timeout=timedelta(seconds=10)
)
secret_dag = single_dag(
    "reliability_secrets",
    deferrable=False,
    secret_env={"HF_TOKEN": "conn:reliability_hf:password"},
    secret_scope="reliability",
)

with DAG(
    "reliability_bad_input_text", schedule=None, start_date=START, params={"workload": ""}
) as bad_input_text_dag:
    AirRunOperator(
        task_id="run",
        workload="{{ params.workload }}",
        deferrable=False,
        stream_logs=False,
        retries=2,
        retry_delay=timedelta(0),
    )
secret_deferred_dag = single_dag(
    "reliability_secrets_deferred",
    deferrable=True,
    secret_env={"HF_TOKEN": "conn:reliability_hf:password"},
    secret_scope="reliability",
)
