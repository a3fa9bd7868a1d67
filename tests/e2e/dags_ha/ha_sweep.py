"""The sweep of the HA deployment tests (tests/e2e/test_airflow_ha.py).

``ha_sweep`` maps a deferrable ``AirRunOperator`` over ``conf["trials"]`` trials. Each
trial's one rank appends its trial number to ``conf["ranks_file"]`` (a run started twice
shows as two lines), prints a node line, then waits until ``conf["release_file"]`` exists,
prints a last node line and ends: the test decides when the runs end, so they outlive a
failover whatever the machine's speed. Runs are named ``<conf["prefix"]>_NNNN``. Tasks
retry (a task whose Celery worker died is retried and must adopt its live run).

``ha_loop_lag`` holds the loop-lag probe of benchmarks/p12_probe.py for ``conf["seconds"]``
in whichever triggerer takes it, writing its samples to ``conf["path"]``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG, task
from airflow_air.operators import AirRunOperator

from benchmarks.p12_probe import LoopLagSensor, LoopLagTrigger

COMMAND = """\
echo "$HA_TRIAL" >> "$HA_RANKS"
echo "trial $HA_TRIAL: started"
while [ ! -e "$HA_RELEASE" ]; do sleep 2; done
echo "trial $HA_TRIAL: released"
"""

with DAG(
    "ha_sweep",
    schedule=None,
    start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
    catchup=False,
    max_active_tasks=2000,
    default_args={"retries": 2, "retry_delay": timedelta(seconds=2)},
    tags=["e2e"],
):

    @task
    def trials(**context: Any) -> list[dict[str, str]]:
        conf = context["dag_run"].conf
        return [
            {
                "experiment_name": f"{conf['prefix']}_{i:04d}",
                "env_variables.HA_TRIAL": str(i),
                "env_variables.HA_RANKS": conf["ranks_file"],
                "env_variables.HA_RELEASE": conf["release_file"],
            }
            for i in range(int(conf["trials"]))
        ]

    AirRunOperator.partial(
        task_id="trial",
        workload={
            "experiment_name": "ha_sweep",
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
            "max_retries": 0,
            "command": COMMAND,
        },
        deferrable=True,
    ).expand(overrides=trials())


class TemplatedLoopLagSensor(LoopLagSensor):
    """The probe, its file and duration from the Dag run's conf."""

    template_fields = ("path", "seconds")

    def execute(self, context: Any) -> None:
        self.defer(trigger=LoopLagTrigger(str(self.path), float(self.seconds)), method_name="done")


with DAG(
    "ha_loop_lag",
    schedule=None,
    start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
    catchup=False,
    tags=["e2e"],
):
    TemplatedLoopLagSensor(
        task_id="probe", path="{{ dag_run.conf['path'] }}", seconds="{{ dag_run.conf['seconds'] }}"
    )
