"""Workflows whose train stage fails twice, for reading each try's log after it is recovered.

prep >> train >> evaluate as one run. Every try of a stage prints ``<stage> try <k> line <i>``
for i in 1..15 (a little apart, so that a deferred try shows some live) and ``<stage> try <k>
done``, k counted in a file of the stage in ``params.dir``; train then fails while k <= 2.
``air_repair_logs_clear`` is recovered by clearing train twice (train waits in the triggerer,
evaluate in the worker); ``air_repair_logs_retries`` by ``retries=2`` on train (train waits in
the worker, evaluate in the triggerer).
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG
from airflow_air.operators import AirRunOperator
from airflow_air.workflow import AirWorkflowTaskGroup

START = pendulum.datetime(2025, 1, 1, tz="UTC")
LINES = 15
FAILING_TRIES = 2


def _workload(stage: str, *, failing: bool = False) -> dict:
    count = f'"{{{{ params.dir }}}}/{stage}"'
    command = (
        f"k=$(( $(cat {count} 2>/dev/null || echo 0) + 1 )); echo $k > {count}; "
        f'for i in $(seq 1 {LINES}); do echo "{stage} try $k line $i"; sleep 0.1; done; '
        f'echo "{stage} try $k done"'
    )
    if failing:
        command += f'; if [ "$k" -le {FAILING_TRIES} ]; then exit 1; fi'
    return {
        "experiment_name": f"repair_logs_{stage}",
        "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
        "max_retries": 0,
        "command": command,
    }


with (
    DAG(
        "air_repair_logs_clear",
        schedule=None,
        start_date=START,
        catchup=False,
        tags=["e2e"],
        params={"dir": "/nonexistent"},
    ),
    AirWorkflowTaskGroup("pipeline", run_name="repair_logs_clear"),
):
    prep = AirRunOperator(task_id="prep", workload=_workload("prep"))
    train = AirRunOperator(
        task_id="train", workload=_workload("train", failing=True), deferrable=True
    )
    evaluate = AirRunOperator(task_id="evaluate", workload=_workload("evaluate"), deferrable=False)
    prep >> train >> evaluate

with (
    DAG(
        "air_repair_logs_retries",
        schedule=None,
        start_date=START,
        catchup=False,
        tags=["e2e"],
        params={"dir": "/nonexistent"},
    ),
    AirWorkflowTaskGroup("pipeline", run_name="repair_logs_retries"),
):
    prep = AirRunOperator(task_id="prep", workload=_workload("prep"))
    train = AirRunOperator(
        task_id="train",
        workload=_workload("train", failing=True),
        deferrable=False,
        retries=FAILING_TRIES,
        retry_delay=timedelta(seconds=1),
    )
    evaluate = AirRunOperator(task_id="evaluate", workload=_workload("evaluate"), deferrable=True)
    prep >> train >> evaluate
