"""Which of the provider's modules a task process holds before its task imports anything: in
a LocalExecutor deployment the process is forked from the scheduler, which loaded the
provider's plugin (``airflow_air.plugin``). This file imports nothing of the provider."""

from __future__ import annotations

import sys

import pendulum
from airflow.sdk import dag, task


@dag(schedule=None, start_date=pendulum.datetime(2025, 1, 1, tz="UTC"), catchup=False)
def task_modules() -> None:
    @task
    def held_at_start() -> dict[str, bool]:
        return {name: name in sys.modules for name in ("airflow_air._task_run", "air_runtime.plan")}

    held_at_start()


task_modules()
