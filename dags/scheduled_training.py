"""Nightly two-node (16 GPU) torchrun training on Databricks AI Runtime.

The workload lives next to this file (``workloads/nightly_torchrun.yaml``) and is rendered by
Jinja, so each night's run carries its date. Retries reattach to a run that is still going
after a worker crash; a manual clear starts a fresh run.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG
from airflow_air.operators import AirRunOperator

with DAG(
    dag_id="scheduled_training",
    schedule="0 2 * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=5)},
    tags=["ai-runtime", "training"],
) as dag:
    AirRunOperator(
        task_id="train",
        workload="workloads/nightly_torchrun.yaml",
        execution_timeout=timedelta(hours=5),
    )
