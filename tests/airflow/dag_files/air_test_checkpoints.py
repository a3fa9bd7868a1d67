"""A trainer that checkpoints every 10 steps into ``AIRO_CHECKPOINT_DIR`` and resumes from
the newest checkpoint it finds there; its first execution stops at step 73 until the test
takes its node away (a simulated node loss). ``platform_retry`` is retried by the platform
(``max_retries: 1``); ``cleared`` is not (``max_retries: 0``), and the test clears it.
Every execution appends its first step to ``<task>.starts``, its resume variables to
``<task>.resume`` and each step to ``<task>.steps``; the folder comes from the Dag run's conf. test_airflow_checkpoints.py
reads them. ``air_test_checkpoints_twin`` has a task of the same id;
``air_test_checkpoints_workflow`` runs the trainer as a workflow stage."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG
from airflow_air.operators import AirRunOperator
from airflow_air.workflow import AirWorkflowTaskGroup

TRAINER = """\
out="{{ dag_run.conf['dir'] }}/{{ ti.task_id }}"
start=0
newest=$(ls "$AIRO_CHECKPOINT_DIR" | sed -n 's/^step-//p' | sort -n | tail -1)
if [ -n "$newest" ]; then start=$newest; fi
echo "$start" >> "$out.starts"
echo "$AIRO_CHECKPOINT_DIR" >> "$out.dirs"
echo "resuming=$AIRO_RESUMING step=${AIRO_RESUME_STEP:-} run=${AIRO_RESUME_RUN:-}" >> "$out.resume"
step=$start
while [ "$step" -lt 100 ]; do
  step=$((step + 1))
  echo "$step" >> "$out.steps"
  if [ $((step % 10)) = 0 ]; then
    echo "$step" > "$AIRO_CHECKPOINT_DIR/step-$step.tmp" && mv "$AIRO_CHECKPOINT_DIR/step-$step.tmp" "$AIRO_CHECKPOINT_DIR/step-$step"
  fi
  if [ "$step" = 73 ] && [ ! -e "$out.at73" ]; then
    touch "$out.at73"
    while true; do sleep 0.05; done
  fi
done
"""


VOLUME = "/Volumes/main/ml/checkpoints"


def _trainer(task_id: str, max_retries: int, **options: object) -> AirRunOperator:
    return AirRunOperator(
        task_id=task_id,
        workload={
            "experiment_name": "ckpt",
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
            "max_retries": max_retries,
            "command": TRAINER,
        },
        deferrable=False,
        poll_interval=0.2,
        **options,
    )


with DAG(
    "air_test_checkpoints", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")
) as checkpoints_dag:
    _trainer("platform_retry", 1, checkpoint_volume=VOLUME)
    _trainer("cleared", 0, checkpoint_volume=VOLUME)

with DAG(
    "air_test_checkpoints_twin", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")
) as checkpoints_twin_dag:
    _trainer("platform_retry", 1, checkpoint_volume=VOLUME)

# A one-stage workflow group: its stages' volume is the connection's (the test sets it).
with (
    DAG(
        "air_test_checkpoints_workflow",
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    ) as checkpoints_workflow_dag,
    AirWorkflowTaskGroup("pipeline", run_name="air_test_checkpoints_workflow"),
):
    _trainer("train", 0)
