"""A sweep of 1- and 2-accelerator trials in a GPU pool of 4, capped in accelerators: one
mapped task per size (``airflow_air.sweeps.mapped_by_size``), each trial holding its
accelerators' worth of slots of the Airflow pool ``gpu_sweep_accelerators``."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG
from airflow_air.sweeps import mapped_by_size

WORKLOAD = {
    "experiment_name": "mixed_sweep",
    "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1, "pool_id": "pool-a10"},
    "max_retries": 0,
    "command": 'echo "lr=$LR rank $POD_RANK of $WORLD_SIZE"',
}
TRIALS = [
    {"compute.num_accelerators": 1, "env_variables.LR": "0.1"},
    {"compute.num_accelerators": 2, "env_variables.LR": "0.03"},
    {"env_variables.LR": "0.01"},  # the workload's 1
    {"compute.num_accelerators": "2", "env_variables.LR": "0.003"},
]

with DAG(
    "air_test_accelerator_caps",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
) as accelerator_caps_dag:
    mapped_by_size(
        "trial",
        workload=WORKLOAD,
        trials=TRIALS,
        pool="gpu_sweep_accelerators",
        deferrable=True,
        poll_interval=0.2,
    )
