"""The Dagster job of the materialization benchmark (P8): K independent AI Runtime assets.

Run by ``python -m benchmarks.dagster_sweep`` with DAGSTER_HOME, AIRO_HOST, AIRO_TOKEN,
AIRO_BENCH_SWEEP_N (K) and AIRO_BENCH_SWEEP_SECONDS (each run's simulated running time) in
the environment: the multiprocess executor runs every asset in its own step process, all at
once (``max_concurrent`` = K), as a Dagster run worker would.
"""

from __future__ import annotations

import os
import sys

import dagster as dg

from dagster_air import AirStage, AirWorkspace, build_air_assets

WIDTH = int(os.environ.get("AIRO_BENCH_SWEEP_N", "10"))
SECONDS = os.environ.get("AIRO_BENCH_SWEEP_SECONDS", "60")


def _definitions() -> dg.Definitions:
    assets = [
        build_air_assets(
            AirStage(
                key=f"trial_{i:03d}",
                workload={
                    "experiment_name": f"dagster_sweep_{i:03d}",
                    "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
                    "max_retries": 0,
                    "env_variables": {"AIRO_SIMULATE": f"pending_s=0,running_s={SECONDS}"},
                    "command": "python train.py",
                },
            ),
            name=f"trial_{i:03d}",
        )
        for i in range(WIDTH)
    ]
    # Defaults of the resource: a status check every 5 s, 10 requests/s per process.
    workspace = AirWorkspace(host=dg.EnvVar("AIRO_HOST"), token=dg.EnvVar("AIRO_TOKEN"))
    return dg.Definitions(
        assets=assets,
        jobs=[dg.define_asset_job("sweep_job")],
        resources={"air_workspace": workspace},
    )


def sweep_job() -> dg.JobDefinition:
    return _definitions().resolve_job_def("sweep_job")


if __name__ == "__main__":
    # Step processes fork from a server that has imported Dagster and dagster_air once (the
    # executor's documented forkserver option): a spawned step would import them anew, which
    # takes seconds of CPU each.
    multiprocess = {
        "max_concurrent": WIDTH,
        "start_method": {"forkserver": {"preload_modules": ["dagster", "dagster_air"]}},
    }
    run_config = {"execution": {"config": {"multiprocess": multiprocess}}}
    with dg.DagsterInstance.get() as instance:
        result = dg.execute_job(
            dg.reconstructable(sweep_job), instance=instance, run_config=run_config
        )
    sys.exit(0 if result.success else 1)
