"""Reinforcement learning pipeline: register images, then train (2 containers) and evaluate
as ONE multi-task AI Runtime run.

- Two Docker Hub images are registered first (idempotent: skipped when already AVAILABLE).
- ``rl`` is an ``AirWorkflowTaskGroup``: the GRPO stage (policy server on node 0, trainer on
  node 1) and the evaluation stage are submitted together; the platform starts the evaluation
  as soon as training succeeds, while Airflow still shows each stage as its own task.
- ``HF_TOKEN`` comes from the ``hf_default`` Airflow connection and reaches the workload only as
  a Databricks secret reference.
- Every Dag run writes to its own ``RL_OUTPUT_DIR`` so concurrent runs never collide.
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG
from airflow_air.operators import AirRegisterImageOperator, AirRunOperator
from airflow_air.workflow import AirWorkflowTaskGroup

RL_EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "rl"
RL_OUTPUT_DIR = (
    "{{ params.output_root }}/{{ dag.dag_id }}/{{ run_id | replace(':', '-') | replace('+', '-') }}"
)

with DAG(
    dag_id="rl_pipeline",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    template_searchpath=[str(RL_EXAMPLES)],
    params={"output_root": "/tmp/airo-rl"},
    tags=["ai-runtime", "rl"],
) as dag:
    images = [
        AirRegisterImageOperator(task_id="register_vllm_image", image="vllm/vllm-openai:v0.8.5"),
        AirRegisterImageOperator(
            task_id="register_pytorch_image",
            image="pytorch/pytorch:2.6.0-cuda12.4-cudnn9-runtime",
        ),
    ]

    with AirWorkflowTaskGroup("rl", run_name="rl_pipeline") as rl:
        grpo = AirRunOperator(
            task_id="grpo",
            workload="grpo_two_containers.yaml",
            overrides={
                "env_variables.RL_OUTPUT_DIR": RL_OUTPUT_DIR,
            },
            secret_env={"HF_TOKEN": "conn:hf_default:password"},
        )
        evaluate = AirRunOperator(
            task_id="evaluate",
            workload="evaluate.yaml",
            overrides={"env_variables.RL_OUTPUT_DIR": RL_OUTPUT_DIR},
        )
        grpo >> evaluate

    images >> rl
