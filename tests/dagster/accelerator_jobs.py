"""Accelerator pools, with AIRO_HOST and AIRO_TOKEN naming a workspace whose GPU pool
``pool-a10`` reserves 4 accelerators:

- four assets of 1 and 2 accelerators (6 in all) sharing one accelerator pool, run as one job
  by the multiprocess executor (every step at once, each in its own process):
  ``python accelerator_jobs.py`` with DAGSTER_HOME set;
- ``defs``, the code location of a deployment (tests/e2e/test_dagster_accelerator_caps.py):
  ``sweep``, whose partitions ask for 1 or 2 accelerators (6 in all), each holding until
  HOLD_FILE exists (the test releases them once a step waited for its accelerators); and ``range_sweep``, six partitions of 1 and 2 accelerators (9
  in all) backfilled as one run (``BackfillPolicy.single_run()``), each partition's size a
  ``partition_overrides`` entry, each rank appending its partition and world size to
  RANKS_FILE."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import dagster as dg

from dagster_air import AirInvocation, AirStage, AirWorkspace, air_workload_asset, build_air_assets

SIZES = {"trial_a": 1, "trial_b": 2, "trial_c": 1, "trial_d": 2}
PARTITION_SIZES = {"lr-0.1": 1, "lr-0.03": 2, "lr-0.01": 1, "lr-0.003": 2}
RANGE_SIZES = {"lr-0.1": 1, "lr-0.05": 2, "lr-0.03": 1, "lr-0.01": 2, "lr-0.005": 1, "lr-0.001": 2}
ACCELERATOR_POOL = "gpu-a10"
GPU_POOL = "pool-a10"


def _workspace() -> AirWorkspace:
    return AirWorkspace(
        host=dg.EnvVar("AIRO_HOST"), token=dg.EnvVar("AIRO_TOKEN"), poll_interval=0.2
    )


@air_workload_asset(
    workload={
        "experiment_name": "mixed_sweep",
        "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1, "pool_id": GPU_POOL},
        "max_retries": 0,
        "env_variables": {"HOLD_FILE": os.environ.get("HOLD_FILE", "/dev/null")},
        "command": 'echo "$AIRO_PARTITION_KEY on $WORLD_SIZE"; '
        'while [ ! -e "$HOLD_FILE" ]; do sleep 0.2; done',
    },
    partitions_def=dg.StaticPartitionsDefinition(list(PARTITION_SIZES)),
    accelerator_pool=ACCELERATOR_POOL,
)
def sweep(context: dg.AssetExecutionContext, air: AirInvocation) -> Iterator[Any]:
    """A trial of the sweep: its partition says how many accelerators it trains on."""
    yield from air.run({"compute.num_accelerators": PARTITION_SIZES[context.partition_key]})


range_sweep = build_air_assets(
    AirStage(
        key="range_sweep",
        workload={
            "experiment_name": "range_sweep",
            "compute": {
                "accelerator_type": "GPU_1xA10",
                "num_accelerators": 1,
                "pool_id": GPU_POOL,
            },
            "max_retries": 0,
            "env_variables": {"RANKS_FILE": os.environ.get("RANKS_FILE", "/dev/null")},
            "command": 'echo "$AIRO_PARTITION_KEY $WORLD_SIZE" >> "$RANKS_FILE"; sleep 2',
        },
    ),
    partitions_def=dg.StaticPartitionsDefinition(list(RANGE_SIZES)),
    partition_overrides={k: {"compute.num_accelerators": n} for k, n in RANGE_SIZES.items()},
    backfill_policy=dg.BackfillPolicy.single_run(),
    accelerator_pool=ACCELERATOR_POOL,
)

defs = dg.Definitions(assets=[sweep, range_sweep], resources={"air_workspace": _workspace()})


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
    return dg.Definitions(
        assets=assets,
        jobs=[dg.define_asset_job("mixed_sizes")],
        resources={"air_workspace": _workspace()},
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
