"""Deferred AI Runtime runs that end in the triggerer, resume in a worker, or time out.

``air_finish``: the same short run twice, once ended by its trigger (the default) and once
resumed in a worker (``finish_in_triggerer=False``), to compare what each leaves.
``air_finish_failure``: a run that fails resumes in a worker for the rich error.
``air_trigger_timeout``: a long run whose deferral Airflow times out while the triggerer is
down; the task must cancel the run.
``air_submit_in_triggerer``: the short run of ``air_finish`` submitted by its trigger
(``submit_in_triggerer``); ``air_trigger_timeout_planned``: the long one, whose trigger never
runs, so no run exists when Airflow times the deferral out.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG
from airflow_air.operators import AirRunOperator

START = pendulum.datetime(2025, 1, 1, tz="UTC")


def _workload(name: str, command: str) -> dict:
    return {
        "experiment_name": name,
        "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
        "max_retries": 0,
        "command": command,
    }


with DAG("air_finish", schedule=None, start_date=START, catchup=False, tags=["e2e"]):
    for task_id, in_triggerer in (("ends_in_triggerer", True), ("ends_in_worker", False)):
        AirRunOperator(
            task_id=task_id,
            workload=_workload(
                task_id,
                f'sleep 12\necho "first line of {task_id}"\necho "last line of {task_id}"\n',
            ),
            secret_env={"HF_TOKEN": "conn:hf_default:password"},
            finish_in_triggerer=in_triggerer,
            deferrable=True,
        )

with DAG("air_finish_failure", schedule=None, start_date=START, catchup=False, tags=["e2e"]):
    AirRunOperator(
        task_id="fails",
        workload=_workload("fails", 'sleep 12\necho "about to exit 3"\nexit 3\n'),
        deferrable=True,
    )

with DAG("air_trigger_timeout", schedule=None, start_date=START, catchup=False, tags=["e2e"]):
    AirRunOperator(
        task_id="held",
        workload=_workload("held", "sleep 900\n"),
        execution_timeout=timedelta(seconds=20),
        deferrable=True,
    )

with DAG("air_submit_in_triggerer", schedule=None, start_date=START, catchup=False, tags=["e2e"]):
    AirRunOperator(
        task_id="submitted_by_trigger",
        workload=_workload(
            "submitted_by_trigger",
            'sleep 12\necho "first line of submitted_by_trigger"\n'
            'echo "last line of submitted_by_trigger"\n',
        ),
        deferrable=True,
        submit_in_triggerer=True,
    )

with DAG(
    "air_trigger_timeout_planned", schedule=None, start_date=START, catchup=False, tags=["e2e"]
):
    AirRunOperator(
        task_id="held",
        workload=_workload("held_planned", "sleep 900\n"),
        execution_timeout=timedelta(seconds=20),
        deferrable=True,
        submit_in_triggerer=True,
    )
