"""A nightly workflow whose stages say who they are: each stage's ranks write their
environment to ``<dir>/env_<stage>_<try>`` and print numbered lines; train fails on its first
try. Read back by test_airflow_stage_identity.py."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG
from airflow_air.operators import AirRunOperator
from airflow_air.workflow import AirWorkflowTaskGroup

LINES = 5


def stage(name: str, *, fail_first: bool = False) -> dict:
    """Try k (1 first, counted in ``<dir>/<name>``) leaves its environment, prints ``<name>
    try k line i`` for i in 1..LINES and ``<name> try k done``; with ``fail_first`` the first
    try then fails."""
    count = f'"{{{{ params.dir }}}}/{name}"'
    command = (
        f"k=$(( $(cat {count} 2>/dev/null || echo 0) + 1 )); echo $k > {count}; "
        f'env > "{{{{ params.dir }}}}/env_{name}_$k"; '
        f'for i in $(seq 1 {LINES}); do echo "{name} try $k line $i"; done; '
        f'echo "{name} try $k done"'
    )
    if fail_first:
        command += '; if [ "$k" -eq 1 ]; then exit 1; fi'
    return {
        "experiment_name": f"nightly_{name}",
        "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
        "max_retries": 0,
        "command": command,
    }


with (
    DAG(
        "air_test_stage_identity",
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        params={"dir": "/nonexistent"},
    ) as stage_identity_dag,
    AirWorkflowTaskGroup("nightly", run_name="nightly_pipe"),
):
    prep = AirRunOperator(task_id="prep", workload=stage("prep"), poll_interval=0.2)
    train = AirRunOperator(
        task_id="train", workload=stage("train", fail_first=True), poll_interval=0.2
    )
    evaluate = AirRunOperator(
        task_id="evaluate", workload=stage("evaluate"), poll_interval=0.2, deferrable=True
    )
    prep >> train >> evaluate
