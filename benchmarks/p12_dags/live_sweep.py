"""The Dag of P12 in a real deployment (benchmarks/p12_triggerer.py): N deferrable
``AirRunOperator`` tasks, each a run whose rank prints a stamped line every 5 s until it is
cancelled (``AIRO_BENCH_P12_COMMAND``), all waiting in the one triggerer at once, and a probe
of the triggerer's event-loop lag (``benchmarks.p12_probe``)."""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG
from airflow_air.operators import AirRunOperator

from benchmarks.p12_probe import LoopLagSensor

WIDTH = int(os.environ.get("AIRO_BENCH_P12_N", "10"))

with DAG(
    "live_sweep",
    schedule=None,
    start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
    catchup=False,
    max_active_tasks=WIDTH,
    tags=["benchmark"],
):
    AirRunOperator.partial(
        task_id="trial",
        workload={
            "experiment_name": "live_sweep",
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
            "max_retries": 0,
            "command": os.environ.get("AIRO_BENCH_P12_COMMAND", "sleep 3600"),
        },
        deferrable=True,
    ).expand(overrides=[{"experiment_name": f"live_sweep_{i:04d}"} for i in range(WIDTH)])

    LoopLagSensor(
        task_id="loop_lag",
        path=os.environ.get("AIRO_BENCH_P12_LAG_FILE", "/dev/null"),
        seconds=float(os.environ.get("AIRO_BENCH_P12_LAG_S", "60")),
    )
