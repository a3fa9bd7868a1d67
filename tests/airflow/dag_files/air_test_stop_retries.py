"""Runs whose first attempt fails while the workload allows 3 retries, under the default
failure policy. ``in_worker`` and ``deferred`` run out of GPU memory (deterministic): each
retry would wait until cancelled (a file marks the first attempt), and the run is cancelled
after the first attempt instead. ``nccl`` times out in a collective (infrastructure): the
platform retries it, and the retry succeeds. ``legacy`` runs out of memory with
``stop_deterministic_retries=False`` (the former default): the platform retries it too.
Each execution appends a line to its task's count file. test_airflow_stop_retries.py reads
how they ended; the folder for the marks comes from the Dag run's conf."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG
from airflow_air.operators import AirRunOperator

OOM = """\
mark="{{ dag_run.conf['marks'] }}/{{ ti.task_id }}"
echo run >> "$mark.count"
if [ -e "$mark" ]; then while true; do sleep 0.1; done; fi
touch "$mark"
echo "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB."
exit 1
"""

RETRIED = """\
mark="{{ dag_run.conf['marks'] }}/{{ ti.task_id }}"
echo run >> "$mark.count"
if [ -e "$mark" ]; then echo "step 100"; exit 0; fi
touch "$mark"
echo "%s"
exit 1
"""
NCCL = "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE)"
OOM_LINE = "torch.OutOfMemoryError: CUDA out of memory."


def _workload(command: str) -> dict[str, object]:
    return {
        "experiment_name": "oom",
        "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
        "max_retries": 3,
        "command": command,
    }


with DAG(
    "air_test_stop_retries",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
) as stop_retries_dag:
    for deferrable in (False, True):
        AirRunOperator(
            task_id="deferred" if deferrable else "in_worker",
            workload=_workload(OOM),
            deferrable=deferrable,
            poll_interval=0.2,
            retries=2,  # an Airflow retry would not help either: none is taken
        )
    AirRunOperator(
        task_id="nccl",
        workload=_workload(RETRIED % NCCL),
        deferrable=True,
        poll_interval=0.2,
    )
    AirRunOperator(
        task_id="legacy",
        workload=_workload(RETRIED % OOM_LINE),
        stop_deterministic_retries=False,
        deferrable=False,
        poll_interval=0.2,
    )
