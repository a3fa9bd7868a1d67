"""Reinforcement learning pipeline: copy the images into Unity Catalog, then train
(2 containers) on the copies and evaluate, as ONE multi-task AI Runtime run.

- Two images are copied from Docker Hub (param ``source_registry``) to the workspace's
  Artifact Registry (param ``artifact_registry_host``; empty: derived from the workspace)
  as ``main.rl.<artifact>:<tag>``, registry to registry, without Docker. A copy that is
  there already sends nothing. Each copy returns its ``unity_catalog_image``, which the GRPO
  stage's containers run (templated into ``containers[N].unity_catalog_image``).
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
    params={
        # Relative: a folder under the user's ~/.cache/airo-rl (examples/rl/rl_common.py).
        "output_root": "airflow",
        "source_registry": "docker.io",
        "artifact_registry_host": "",
    },
    tags=["ai-runtime", "rl"],
) as dag:
    copy_images = {
        name: AirRegisterImageOperator(
            task_id=f"copy_{name}_image",
            image="{{ params.source_registry }}/" + source,
            catalog="main",
            schema="rl",
            artifact=artifact,
            registry_host="{{ params.artifact_registry_host }}",
        )
        for name, source, artifact in (
            ("vllm", "vllm/vllm-openai:v0.8.5", "vllm:0.8.5"),
            ("pytorch", "pytorch/pytorch:2.6.0-cuda12.4-cudnn9-runtime", None),
        )
    }

    with AirWorkflowTaskGroup("rl", run_name="rl_pipeline") as rl:
        grpo = AirRunOperator(
            task_id="grpo",
            workload="grpo_two_containers.yaml",
            overrides={
                "env_variables.RL_OUTPUT_DIR": RL_OUTPUT_DIR,
                # Train on what was copied: the references the copies returned (the default
                # is only what definition-time checks render, where no XCom exists yet).
                "containers[0].unity_catalog_image": (
                    "{{ ti.xcom_pull(task_ids='copy_vllm_image') | default('main.rl.vllm:0.8.5') }}"
                ),
                "containers[1].unity_catalog_image": (
                    "{{ ti.xcom_pull(task_ids='copy_pytorch_image')"
                    " | default('main.rl.pytorch:2.6.0-cuda12.4-cudnn9-runtime') }}"
                ),
            },
            secret_env={"HF_TOKEN": "conn:hf_default:password"},
        )
        evaluate = AirRunOperator(
            task_id="evaluate",
            workload="evaluate.yaml",
            overrides={"env_variables.RL_OUTPUT_DIR": RL_OUTPUT_DIR},
        )
        grpo >> evaluate

    list(copy_images.values()) >> rl
