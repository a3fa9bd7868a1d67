"""A deferred task whose run prints, then holds until released, then prints again: the test
kills the triggerer (SIGKILL) and starts it again while the run holds, and reads the task's
log for lines shown twice.

``air_resume_lines``: one node prints ``before 1`` .. ``before 20``, waits for the file the Dag
run's conf names (``release``), then prints ``after 1`` .. ``after 20`` and ends.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG
from airflow_air.operators import AirRunOperator

LINES = 20

with DAG(
    "air_resume_lines",
    schedule=None,
    start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
    catchup=False,
    tags=["e2e"],
):
    release = "{{ dag_run.conf['release'] }}"
    AirRunOperator(
        task_id="held",
        workload={
            "experiment_name": "resume_lines",
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
            "max_retries": 0,
            "command": (
                f'for i in $(seq 1 {LINES}); do echo "before $i"; done\n'
                f'while [ ! -e "{release}" ]; do sleep 0.2; done\n'
                f'for i in $(seq 1 {LINES}); do echo "after $i"; sleep 0.1; done\n'
            ),
        },
        deferrable=True,
    )
