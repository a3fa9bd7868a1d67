"""What the deployment benchmark's (P7) Dags share: the sweep's width and durations, and the
Dag and task shapes. Each Dag has a file of its own, as in a real deployment: a task process
parses only the file of its own Dag (``.airflowignore`` keeps this module from being parsed
as one; the bundle's folder is on ``sys.path``, so the Dag files import it).

``air_sweep`` maps ``AirRunOperator`` over N trials, each a run that the local workspace (in
simulate mode) holds for its own ``AIRO_SIMULATE`` running time (``air_planned_sweep``: the
same, each trial submitted by its trigger, ``submit_in_triggerer``); ``floor_sweep`` maps
Airflow's own deferrable ``WaitSensor`` over the same durations, so its wall time is what the
deployment needs for the same waiting with no remote runs at all; ``zero_worker_sweep`` is
the same waiting with no worker at all: N ``DateTimeSensorAsync`` tasks that start and end in
the triggerer (``start_from_trigger``, ``end_from_trigger``; not mapped: a mapped task's
trigger kwargs are not templated), each waiting its duration from when it starts.

N and the durations come from the environment of the deployment (AIRO_BENCH_SWEEP_N,
AIRO_BENCH_SWEEP_SECONDS: comma-separated, used in turn).
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG

WIDTH = int(os.environ.get("AIRO_BENCH_SWEEP_N", "40"))
SECONDS = [float(s) for s in os.environ.get("AIRO_BENCH_SWEEP_SECONDS", "30").split(",")]
DURATIONS = [SECONDS[i % len(SECONDS)] for i in range(WIDTH)]
# A few tasks of each kind, run before anything is measured: every service and the task
# processes' imports are warm for whichever sweep comes first.
WARM_UP_TASKS = 8


def sweep_dag(dag_id: str) -> DAG:
    return DAG(
        dag_id,
        schedule=None,
        start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
        catchup=False,
        max_active_tasks=WIDTH,
        tags=["benchmark"],
    )


def air_trials(task_id: str, experiment: str, seconds: list[float], **operator_kwargs: Any) -> None:
    """One deferrable AirRunOperator mapped over ``seconds``, each run named
    <experiment>_NNNN and held by the workspace for its seconds."""
    from airflow_air.operators import AirRunOperator

    AirRunOperator.partial(
        task_id=task_id,
        workload={
            "experiment_name": experiment,
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
            "max_retries": 0,
            "command": "python train.py",
        },
        deferrable=True,
        **operator_kwargs,
    ).expand(
        overrides=[
            {
                "experiment_name": f"{experiment}_{i:04d}",
                "env_variables.AIRO_SIMULATE": f"pending_s=0,running_s={s:g}",
            }
            for i, s in enumerate(seconds)
        ]
    )


def waits(task_id: str, seconds: list[float]) -> None:
    """Airflow's deferrable ``WaitSensor`` mapped over ``seconds``."""
    from airflow.providers.standard.sensors.time_delta import WaitSensor

    # A plain number would be minutes to WaitSensor.
    WaitSensor.partial(task_id=task_id, deferrable=True).expand(
        time_to_wait=[timedelta(seconds=s) for s in seconds]
    )


def zero_worker_wait(task_id: str, seconds: float) -> None:
    """A ``DateTimeSensorAsync`` that starts and ends in the triggerer, waiting ``seconds``
    from when it starts (rendered when the trigger is created)."""
    from airflow.providers.standard.sensors.date_time import DateTimeSensorAsync

    DateTimeSensorAsync(
        task_id=task_id,
        target_time="{{ (macros.datetime.utcnow() + macros.timedelta(seconds="
        + f"{seconds:g}"
        + ")).isoformat() }}",
        start_from_trigger=True,
        end_from_trigger=True,
    )
