"""A sweep of 12 trials sharing one GPU-hour budget (``sweep_gpu_hours_budget`` through
``default_args``). Each trial holds 32 H100s (4 nodes) and ends once the test creates its file
``<gate>/go_<map index>`` (``dag_run.conf["gate"]``), so the test decides which trials end and
which keep spending until the budget stops them. test_airflow_sweep_budget.py reads how it
went."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG
from airflow_air.operators import AirRunOperator

BUDGET_GPU_HOURS = 0.03
POLL_INTERVAL_S = 1.0
TRIALS = 12

WORKLOAD = {
    "experiment_name": "budget_sweep",
    "compute": {"accelerator_type": "GPU_8xH100", "num_accelerators": 32},
    "max_retries": 0,
    "timeout_minutes": 1,  # a budget that stops nothing fails the test, never hangs it
    "command": (
        'until [ -e "{{ dag_run.conf["gate"] }}/go_$AIRO_MAP_INDEX" ]; do sleep 0.05; done; '
        "echo released"
    ),
}

with DAG(
    "air_test_sweep_budget",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    default_args={"sweep_gpu_hours_budget": BUDGET_GPU_HOURS},
) as sweep_budget_dag:
    AirRunOperator.partial(
        task_id="trial", workload=WORKLOAD, deferrable=True, poll_interval=POLL_INTERVAL_S
    ).expand(overrides=[{"env_variables.TRIAL": str(i)} for i in range(TRIALS)])
