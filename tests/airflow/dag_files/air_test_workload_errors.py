"""Workload errors a retry cannot fix: each task fails at once, naming the file or override.
(A file of its own: parsing it logs Airflow's "Failed to resolve template field" for the
missing file, which the other test Dags' logs need not show.)"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG
from airflow_air.operators import AirRunOperator
from airflow_air.workflow import AirWorkflowTaskGroup

START = pendulum.datetime(2026, 1, 1, tz="UTC")

with DAG(
    "air_test_workload_errors",
    schedule=None,
    start_date=START,
    params={"name": "checks", "gpus": 0},
    default_args={"retries": 2, "retry_delay": timedelta(seconds=0)},
) as workload_errors_dag:
    AirRunOperator(task_id="missing_file", workload="workloads/missing.yaml")
    AirRunOperator(task_id="invalid_file", workload="workloads/invalid.yaml")
    AirRunOperator(
        task_id="bad_override",
        workload="workloads/templated.yaml",
        overrides={"compute.num_accelerators": "{{ params.gpus }}"},
    )
    with AirWorkflowTaskGroup("group", run_name="air_test_workload_errors"):
        AirRunOperator(
            task_id="stage",
            workload="workloads/templated.yaml",
            overrides={"compute.accelerator_typ": "GPU_1xA10"},
        )
