"""Many concurrent deferrable AI Runtime runs, for the deployment tests.

``air_fanout_20`` starts 20 runs that each take ~15 s while the deployment has far fewer
worker slots (``parallelism=4``): the DAG only finishes in time if deferred tasks give their
slots back and the triggerer waits on all runs at once. ``air_fanout_6`` is the smaller
variant for the Celery deployment.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG
from airflow_air.operators import AirRunOperator

RUN_SECONDS = 15


def fanout_dag(dag_id: str, width: int) -> DAG:
    with DAG(
        dag_id,
        schedule=None,
        start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
        catchup=False,
        max_active_tasks=width,
        tags=["e2e"],
    ) as dag:
        for index in range(width):
            AirRunOperator(
                task_id=f"run_{index:02d}",
                workload={
                    "experiment_name": f"{dag_id}_{index:02d}",
                    "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
                    "max_retries": 0,
                    "command": f'sleep {RUN_SECONDS}\necho "fan-out run {index} done"\n',
                },
                deferrable=True,
            )
    return dag


fanout_20 = fanout_dag("air_fanout_20", 20)
fanout_6 = fanout_dag("air_fanout_6", 6)
