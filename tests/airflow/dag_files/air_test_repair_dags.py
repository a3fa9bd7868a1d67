"""A workflow whose middle stage runs out of GPU memory once: prep >> train >> evaluate, each
stage appending a line to a file of its own in ``params.dir`` every time a rank executes it."""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG
from airflow_air.operators import AirRunOperator
from airflow_air.workflow import AirWorkflowTaskGroup

START = pendulum.datetime(2026, 1, 1, tz="UTC")
OOM = "torch.OutOfMemoryError: CUDA out of memory"


def counted(stage: str, *, fail_first: bool = False) -> str:
    """A command that records each execution in ``<dir>/<stage>``; with ``fail_first`` its
    first execution fails the way training runs out of memory."""
    path = f'"{{{{ params.dir }}}}/{stage}"'
    command = f"n=$(cat {path} 2>/dev/null | wc -l); echo run >> {path}"
    if fail_first:
        command += f'; if [ "$n" -eq 0 ]; then echo "{OOM}" >&2; exit 1; fi'
    return command + f"; echo {stage} done"


def workload(stage: str, *, fail_first: bool = False) -> dict:
    return {
        "experiment_name": stage,
        "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
        "max_retries": 0,
        "command": counted(stage, fail_first=fail_first),
    }


with (
    DAG(
        "air_test_workflow_repair",
        schedule=None,
        start_date=START,
        params={"dir": "/nonexistent"},
    ) as repair_dag,
    AirWorkflowTaskGroup("pipeline", run_name="air_test_workflow_repair"),
):
    prep = AirRunOperator(task_id="prep", workload=workload("prep"), poll_interval=0.2)
    train = AirRunOperator(
        task_id="train", workload=workload("train", fail_first=True), poll_interval=0.2
    )
    evaluate = AirRunOperator(
        task_id="evaluate", workload=workload("evaluate"), poll_interval=0.2, deferrable=True
    )
    prep >> train >> evaluate

# The same pipeline, train retried once by Airflow instead of cleared by hand.
with (
    DAG(
        "air_test_workflow_repair_retry",
        schedule=None,
        start_date=START,
        params={"dir": "/nonexistent"},
    ) as retry_dag,
    AirWorkflowTaskGroup("pipeline", run_name="air_test_workflow_repair_retry"),
):
    prep = AirRunOperator(task_id="prep", workload=workload("prep"), poll_interval=0.2)
    train = AirRunOperator(
        task_id="train",
        workload=workload("train", fail_first=True),
        poll_interval=0.2,
        retries=1,
        retry_delay=timedelta(seconds=0),
    )
    evaluate = AirRunOperator(task_id="evaluate", workload=workload("evaluate"), poll_interval=0.2)
    prep >> train >> evaluate

# Two stages in parallel, both running out of memory once, then one that needs both.
with (
    DAG(
        "air_test_workflow_repair_parallel",
        schedule=None,
        start_date=START,
        params={"dir": "/nonexistent"},
    ) as parallel_dag,
    AirWorkflowTaskGroup("pipeline", run_name="air_test_workflow_repair_parallel"),
):
    prep = AirRunOperator(task_id="prep", workload=workload("prep"), poll_interval=0.2)
    train_a = AirRunOperator(
        task_id="train_a", workload=workload("train_a", fail_first=True), poll_interval=0.2
    )
    train_b = AirRunOperator(
        task_id="train_b", workload=workload("train_b", fail_first=True), poll_interval=0.2
    )
    evaluate = AirRunOperator(task_id="evaluate", workload=workload("evaluate"), poll_interval=0.2)
    prep >> [train_a, train_b] >> evaluate

# Train reads a secret: a repair must find it again (the run's keys go when the run ends).
with (
    DAG(
        "air_test_workflow_repair_secret",
        schedule=None,
        start_date=START,
        params={"dir": "/nonexistent"},
    ) as secret_dag,
    AirWorkflowTaskGroup("pipeline", run_name="air_test_workflow_repair_secret"),
):
    prep = AirRunOperator(task_id="prep", workload=workload("prep"), poll_interval=0.2)
    train = AirRunOperator(
        task_id="train",
        workload={
            **workload("train", fail_first=True),
            "command": '[ -n "$API_KEY" ] || exit 7; ' + counted("train", fail_first=True),
        },
        poll_interval=0.2,
        secret_env={"API_KEY": "var:air_test_api_key"},
        secret_scope="air-tests-repair",
    )
    evaluate = AirRunOperator(task_id="evaluate", workload=workload("evaluate"), poll_interval=0.2)
    prep >> train >> evaluate
