"""The RL pipeline: copy the images into Unity Catalog, then GRPO training on the copies
(policy server on node 0, trainer on node 1) and its evaluation; plus a sweep over dynamic
partitions.

The trainer reports the blocking check ``reward_learned`` through Dagster Pipes (the final
mean reward reached the ``min_train_reward`` parameter, 0.3 unless a run's config sets
``parameters.min_train_reward``): the evaluation is a run of its own, submitted only once the
check passed (a failed check keeps it from starting at all).

The images are copied from Docker Hub (``RL_SOURCE_REGISTRY`` names another registry) to
the workspace's Artifact Registry (``AIRO_ARTIFACT_REGISTRY`` names its host; by default it
is derived from the workspace) under the names grpo_two_containers.yaml runs."""

import os
from pathlib import Path

import dagster as dg

from dagster_air import (
    AirInvocation,
    AirStage,
    air_workload_asset,
    build_air_assets,
    build_unity_catalog_image_asset,
)

RL_EXAMPLES = Path(__file__).resolve().parents[3] / "rl"
# A relative RL_OUTPUT_DIR is a folder under the user's ~/.cache/airo-rl (rl_common.py).
OUTPUT_ROOT = os.environ.get("RL_OUTPUT_ROOT") or "dagster"
HF_TOKEN = {"HF_TOKEN": dg.EnvVar("HF_TOKEN")}

SOURCE_REGISTRY = os.environ.get("RL_SOURCE_REGISTRY", "docker.io")

air_images = build_unity_catalog_image_asset(
    {
        f"{SOURCE_REGISTRY}/vllm/vllm-openai:v0.8.5": "vllm:0.8.5",
        f"{SOURCE_REGISTRY}/pytorch/pytorch:2.6.0-cuda12.4-cudnn9-runtime": None,
    },
    catalog="main",
    schema="rl",
    registry_host=os.environ.get("AIRO_ARTIFACT_REGISTRY") or None,
    key="air_images",
    group_name="rl",
)


@air_workload_asset(
    stages=[
        AirStage(
            key="grpo",
            workload=RL_EXAMPLES / "grpo_two_containers.yaml",
            deps=[air_images],
            asset_attributes={"group_name": "rl"},
            check_specs=[
                {
                    "name": "reward_learned",
                    "blocking": True,
                    "description": "The trained policy's mean reward reached min_train_reward.",
                }
            ],
        ),
        AirStage(
            key="evaluate",
            workload=RL_EXAMPLES / "evaluate.yaml",
            depends_on=["grpo"],
            asset_attributes={"group_name": "rl"},
        ),
    ],
    secret_env=HF_TOKEN,
    # Each run trains into its own folder, recorded as the materialization's dagster/uri;
    # evaluating alone gets the folder of the latest training in RL_OUTPUT_DIR.
    run_env={"RL_OUTPUT_DIR": OUTPUT_ROOT + "/{run_id}"},
    output_env="RL_OUTPUT_DIR",
)
def rl_pipeline(context: dg.AssetExecutionContext, air: AirInvocation):
    """GRPO training, then its evaluation once the blocking check passed."""
    yield from air.run()


rl_trials = dg.DynamicPartitionsDefinition(name="rl_trials")

# Add trials with keys like "learning_rate=0.1,epochs=3": they become parameters.
rl_trial = build_air_assets(
    AirStage(
        key="rl_trial",
        workload=RL_EXAMPLES / "grpo_two_containers.yaml",
        deps=[air_images],
        asset_attributes={"group_name": "sweeps"},
    ),
    partitions_def=rl_trials,
    secret_env=HF_TOKEN,
    run_env={"RL_OUTPUT_DIR": OUTPUT_ROOT + "/trials/{run_id}"},
)
