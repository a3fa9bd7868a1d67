"""Two teams' Dags whose deferred tasks wait at once on runs that end differently, for the
check that each task's log holds its own run's lines only (one watcher serves them all).

``air_logs_team_a``: a success, a failure, and a run on the one-accelerator GPU pool
``pool-log-routing``. ``air_logs_team_b``: another run on that pool (one of the two waits for
capacity while the other holds it until the test releases it) and a workflow of two parallel stages of one run, one succeeding, one failing.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG
from airflow_air.operators import AirRunOperator
from airflow_air.workflow import AirWorkflowTaskGroup

START = pendulum.datetime(2025, 1, 1, tz="UTC")
POOL_ID = "pool-log-routing"


def _workload(name: str, command: str, *, pool: bool = False) -> dict:
    compute: dict = {"accelerator_type": "GPU_1xA10", "num_accelerators": 1}
    if pool:
        compute["pool_id"] = POOL_ID
    return {"experiment_name": name, "compute": compute, "max_retries": 0, "command": command}


def _prints(name: str, *, exit_code: int = 0) -> str:
    end = f"exit {exit_code}\n" if exit_code else ""
    return f'echo "start of {name}"\nsleep 15\necho "end of {name}"\n{end}'


def _holds_until_released(name: str) -> str:
    """Runs until the file the Dag run's conf names exists: the test releases the pool once
    it has seen the other pool run wait for it."""
    release = "{{ dag_run.conf['release'] }}"
    return (
        f'echo "start of {name}"\n'
        f'while [ ! -e "{release}" ]; do sleep 0.5; done\n'
        f'echo "end of {name}"\n'
    )


with DAG("air_logs_team_a", schedule=None, start_date=START, catchup=False, tags=["e2e"]):
    AirRunOperator(task_id="a_ok", workload=_workload("a_ok", _prints("a_ok")), deferrable=True)
    AirRunOperator(
        task_id="a_fails",
        workload=_workload("a_fails", _prints("a_fails", exit_code=3)),
        deferrable=True,
    )
    AirRunOperator(
        task_id="a_pool",
        workload=_workload("a_pool", _holds_until_released("a_pool"), pool=True),
        deferrable=True,
    )

with DAG("air_logs_team_b", schedule=None, start_date=START, catchup=False, tags=["e2e"]):
    AirRunOperator(
        task_id="b_pool",
        workload=_workload("b_pool", _holds_until_released("b_pool"), pool=True),
        deferrable=True,
    )
    with AirWorkflowTaskGroup("b_flow", run_name="b_flow"):
        AirRunOperator(task_id="left", workload=_workload("left", _prints("left")), deferrable=True)
        AirRunOperator(
            task_id="right",
            workload=_workload("right", _prints("right", exit_code=4)),
            deferrable=True,
        )
