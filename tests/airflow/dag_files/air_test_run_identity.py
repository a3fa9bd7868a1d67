"""A mapped sweep whose ranks write their environment to a file: the run names and the
orchestrator variables of each trial are read back by test_airflow_run_identity.py."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG
from airflow_air.operators import AirRunOperator

with DAG(
    "air_test_run_identity",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    params={"out_dir": ""},
) as run_identity_dag:
    AirRunOperator.partial(
        task_id="trial",
        workload={
            "experiment_name": "identity_sweep",
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
            "max_retries": 0,
            "command": 'env > "{{ params.out_dir }}/env_$AIRO_MAP_INDEX"',
        },
        deferrable=False,
        poll_interval=0.2,
    ).expand(overrides=[{"env_variables.LR": "0.1"}, {"env_variables.LR": "0.01"}])
