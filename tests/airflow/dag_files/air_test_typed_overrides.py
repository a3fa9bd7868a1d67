"""A templated numeric override: ``"{{ params.gpus }}"`` renders to text, which the workload's
schema types as the integer ``compute.num_accelerators`` is."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG
from airflow_air.operators import AirRunOperator

with DAG(
    "air_test_typed_overrides",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    params={"gpus": 2},
) as typed_overrides_dag:
    AirRunOperator(
        task_id="train",
        workload={
            "experiment_name": "typed_overrides",
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
            "max_retries": 0,
            "command": 'echo "rank $POD_RANK of $WORLD_SIZE"',
        },
        overrides={"compute.num_accelerators": "{{ params.gpus }}"},
        deferrable=False,
        poll_interval=0.2,
    )
