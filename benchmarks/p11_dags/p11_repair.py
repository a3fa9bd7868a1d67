"""The Dag of the recovery benchmark (P11, Airflow): prep >> train >> evaluate in one
``AirWorkflowTaskGroup``, each stage on 8 accelerators for a fixed time; train runs out of
GPU memory at the end of its first execution. Every execution appends ``<start ns> <end ns>
<ok|failed>`` to ``<params.dir>/<stage>``: what the benchmark counts GPU-hours from."""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG
from airflow_air.operators import AirRunOperator
from airflow_air.workflow import AirWorkflowTaskGroup

ACCELERATORS = 8
# Seconds each stage holds its accelerators (AIRO_BENCH_P11_SECONDS: prep,train,evaluate).
SECONDS = dict(
    zip(
        ("prep", "train", "evaluate"),
        (float(s) for s in os.environ.get("AIRO_BENCH_P11_SECONDS", "4,4,1").split(",")),
        strict=True,
    )
)


def _workload(stage: str, *, fail_first: bool = False) -> dict:
    path = f'"{{{{ params.dir }}}}/{stage}"'
    lines = [
        f"n=$(cat {path} 2>/dev/null | wc -l); s=$(date +%s%N)",
        f"sleep {SECONDS[stage]:g}; e=$(date +%s%N)",
    ]
    if fail_first:
        lines.append(
            f'if [ "$n" -eq 0 ]; then echo "$s $e failed" >> {path}; '
            'echo "torch.OutOfMemoryError: CUDA out of memory" >&2; exit 1; fi'
        )
    lines.append(f'echo "$s $e ok" >> {path}')
    return {
        "experiment_name": f"p11_{stage}",
        "compute": {"accelerator_type": "GPU_8xH100", "num_accelerators": ACCELERATORS},
        "max_retries": 0,
        "command": "\n".join(lines) + "\n",
    }


with (
    DAG(
        "p11_repair",
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        params={"dir": "/nonexistent"},
    ) as dag,
    AirWorkflowTaskGroup("pipeline", run_name="p11_repair"),
):
    prep = AirRunOperator(task_id="prep", workload=_workload("prep"), poll_interval=0.2)
    train = AirRunOperator(
        task_id="train", workload=_workload("train", fail_first=True), poll_interval=0.2
    )
    evaluate = AirRunOperator(task_id="evaluate", workload=_workload("evaluate"), poll_interval=0.2)
    prep >> train >> evaluate
