"""The DAGs of the deployment benchmark (P7): one sweep of N deferrable tasks each.

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

import pendulum
from airflow.providers.standard.sensors.date_time import DateTimeSensorAsync
from airflow.providers.standard.sensors.time_delta import WaitSensor
from airflow.sdk import DAG
from airflow_air.operators import AirRunOperator

WIDTH = int(os.environ.get("AIRO_BENCH_SWEEP_N", "40"))
SECONDS = [float(s) for s in os.environ.get("AIRO_BENCH_SWEEP_SECONDS", "30").split(",")]
DURATIONS = [SECONDS[i % len(SECONDS)] for i in range(WIDTH)]


def _dag(dag_id: str) -> DAG:
    return DAG(
        dag_id,
        schedule=None,
        start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
        catchup=False,
        max_active_tasks=WIDTH,
        tags=["benchmark"],
    )


def _air_sweep(dag_id: str, **operator_kwargs: object) -> None:
    """One deferrable AirRunOperator mapped over the trials, each run named <dag_id>_NNNN."""
    with _dag(dag_id):
        AirRunOperator.partial(
            task_id="trial",
            workload={
                "experiment_name": dag_id,
                "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
                "max_retries": 0,
                "command": "python train.py",
            },
            deferrable=True,
            **operator_kwargs,
        ).expand(
            overrides=[
                {
                    "experiment_name": f"{dag_id}_{i:04d}",
                    "env_variables.AIRO_SIMULATE": f"pending_s=0,running_s={seconds:g}",
                }
                for i, seconds in enumerate(DURATIONS)
            ]
        )


_air_sweep("air_sweep")
# The same trials, each submitted by its trigger.
_air_sweep("air_planned_sweep", submit_in_triggerer=True)

with _dag("floor_sweep"):
    # A plain number would be minutes to WaitSensor.
    WaitSensor.partial(task_id="trial", deferrable=True).expand(
        time_to_wait=[timedelta(seconds=s) for s in DURATIONS]
    )

# A few tasks of each kind, run before anything is measured: every service and the task
# processes' imports are warm for whichever sweep comes first.
WARM_UP_TASKS = 8
with _dag("warm_up"):
    AirRunOperator.partial(
        task_id="air",
        workload={
            "experiment_name": "warm_up",
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
            "max_retries": 0,
            "command": "python train.py",
        },
        deferrable=True,
    ).expand(
        overrides=[
            {
                "experiment_name": f"warm_up_{i:04d}",
                "env_variables.AIRO_SIMULATE": "pending_s=0,running_s=5",
            }
            for i in range(WARM_UP_TASKS)
        ]
    )
    WaitSensor.partial(task_id="wait", deferrable=True).expand(
        time_to_wait=[timedelta(seconds=5)] * WARM_UP_TASKS
    )
    for i in range(WARM_UP_TASKS):  # not mapped: see zero_worker_sweep
        DateTimeSensorAsync(
            task_id=f"zero_worker_{i}",
            target_time="{{ (macros.datetime.utcnow() + macros.timedelta(seconds=5)).isoformat() }}",
            start_from_trigger=True,
            end_from_trigger=True,
        )

with _dag("zero_worker_sweep"):
    for i, seconds in enumerate(DURATIONS):
        DateTimeSensorAsync(
            task_id=f"trial_{i:04d}",
            # Rendered when the trigger is created, i.e. when the task starts.
            target_time="{{ (macros.datetime.utcnow() + macros.timedelta(seconds="
            + f"{seconds:g}"
            + ")).isoformat() }}",
            start_from_trigger=True,
            end_from_trigger=True,
        )
