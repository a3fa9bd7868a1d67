"""Runs whose first attempt runs out of GPU memory while the workload allows 3 retries; each
retry would wait until cancelled (a file marks the first attempt). With
``stop_deterministic_retries`` the run is cancelled after the first attempt, waiting in the
worker or in the triggerer. test_airflow_stop_retries.py reads how they ended; the folder
for the marks comes from the Dag run's conf."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG
from airflow_air.operators import AirRunOperator

COMMAND = """\
mark="{{ dag_run.conf['marks'] }}/{{ ti.task_id }}"
if [ -e "$mark" ]; then while true; do sleep 0.1; done; fi
touch "$mark"
echo "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB."
exit 1
"""

with DAG(
    "air_test_stop_retries",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
) as stop_retries_dag:
    for deferrable in (False, True):
        AirRunOperator(
            task_id="deferred" if deferrable else "in_worker",
            workload={
                "experiment_name": "oom",
                "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
                "max_retries": 3,
                "command": COMMAND,
            },
            stop_deterministic_retries=True,
            deferrable=deferrable,
            poll_interval=0.2,
            retries=2,  # an Airflow retry would not help either: none is taken
        )
