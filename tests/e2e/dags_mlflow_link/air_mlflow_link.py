"""Two tasks whose runs are held RUNNING until the test releases them: one waits in the
triggerer (deferrable), one in its worker; the test reads each task's MLflow link meanwhile."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG
from airflow_air.operators import AirRunOperator

START = pendulum.datetime(2025, 1, 1, tz="UTC")


def _held(name: str) -> dict:
    release = "{{ dag_run.conf['release'] }}"
    return {
        "experiment_name": name,
        "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
        "max_retries": 0,
        "command": (
            f'echo "start of {name}"\n'
            f'while [ ! -e "{release}" ]; do sleep 0.5; done\n'
            f'echo "end of {name}"\n'
        ),
    }


with DAG("air_mlflow_link", schedule=None, start_date=START, catchup=False, tags=["e2e"]):
    AirRunOperator(task_id="deferred", workload=_held("deferred"), deferrable=True)
    AirRunOperator(task_id="in_worker", workload=_held("in_worker"), deferrable=False)
