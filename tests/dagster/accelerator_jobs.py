"""Four assets of 1 and 2 accelerators (6 in all) sharing one accelerator pool, run as one
job by the multiprocess executor (every step at once, each in its own process):
``python accelerator_jobs.py`` with DAGSTER_HOME, AIRO_HOST and AIRO_TOKEN set."""

from __future__ import annotations

import sys

import dagster as dg

from dagster_air import AirStage, AirWorkspace, build_air_assets

SIZES = {"trial_a": 1, "trial_b": 2, "trial_c": 1, "trial_d": 2}
ACCELERATOR_POOL = "gpu-a10"
GPU_POOL = "pool-a10"


def _definitions() -> dg.Definitions:
    assets = [
        build_air_assets(
            AirStage(
                key=key,
                workload={
                    "experiment_name": key,
                    "compute": {
                        "accelerator_type": "GPU_1xA10",
                        "num_accelerators": size,
                        "pool_id": GPU_POOL,
                    },
                    "max_retries": 0,
                    "command": "echo trained on $WORLD_SIZE; sleep 3",
                },
            ),
            accelerator_pool=ACCELERATOR_POOL,
        )
        for key, size in SIZES.items()
    ]
    workspace = AirWorkspace(
        host=dg.EnvVar("AIRO_HOST"), token=dg.EnvVar("AIRO_TOKEN"), poll_interval=0.2
    )
    return dg.Definitions(
        assets=assets,
        jobs=[dg.define_asset_job("mixed_sizes")],
        resources={"air_workspace": workspace},
    )


def mixed_sizes() -> dg.JobDefinition:
    return _definitions().resolve_job_def("mixed_sizes")


if __name__ == "__main__":
    run_config = {"execution": {"config": {"multiprocess": {"max_concurrent": len(SIZES)}}}}
    with dg.DagsterInstance.get() as instance:
        result = dg.execute_job(
            dg.reconstructable(mixed_sizes), instance=instance, run_config=run_config
        )
        print(f"run {result.run_id}: {'success' if result.success else 'failure'}")
    sys.exit(0 if result.success else 1)
