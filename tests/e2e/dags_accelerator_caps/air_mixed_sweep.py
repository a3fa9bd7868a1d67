"""A sweep of 1- and 2-accelerator trials (6 accelerators in all) in a GPU pool of 4,
capped in accelerators: one mapped task per size, each trial holding its accelerators' worth
of slots of the pool ``gpu_sweep_accelerators`` (sized from the GPU pool). Each trial runs a
few seconds, so uncapped they would all run at once."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG
from airflow_air.sweeps import mapped_by_size

WORKLOAD = {
    "experiment_name": "mixed_sweep",
    "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1, "pool_id": "pool-a10"},
    "max_retries": 0,
    "command": 'echo "lr=$LR on $WORLD_SIZE"; sleep 4',
}

with DAG("air_mixed_sweep", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")):
    mapped_by_size(
        "trial",
        workload=WORKLOAD,
        trials=[
            {"compute.num_accelerators": n, "env_variables.LR": lr}
            for n, lr in ((1, "0.1"), (2, "0.03"), (1, "0.01"), (2, "0.003"))
        ],
        pool="gpu_sweep_accelerators",
        deferrable=True,
        poll_interval=0.5,
    )
