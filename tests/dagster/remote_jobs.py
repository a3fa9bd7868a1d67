"""A job run in its own process by the termination and crash tests, the way a Dagster run
worker runs it: ``python remote_jobs.py <executor>`` with DAGSTER_HOME, AIRO_HOST,
AIRO_TOKEN, AIR_TEST_COMMAND and AIR_TEST_RETRIES in the environment."""

from __future__ import annotations

import os
import sys

import dagster as dg

from dagster_air import AirStage, AirWorkspace, build_air_assets


def _definitions() -> dg.Definitions:
    assets = build_air_assets(
        AirStage(
            key="long_step",
            workload={
                "experiment_name": "long_step",
                "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
                "max_retries": 0,
                "command": os.environ["AIR_TEST_COMMAND"],
            },
        ),
        retry_policy=dg.RetryPolicy(max_retries=int(os.environ.get("AIR_TEST_RETRIES", "0"))),
    )
    workspace = AirWorkspace(
        host=dg.EnvVar("AIRO_HOST"),
        token=dg.EnvVar("AIRO_TOKEN"),
        poll_interval=0.2,
        request_budget=50,
        cancel_wait=20,
    )
    return dg.Definitions(
        assets=[assets],
        jobs=[dg.define_asset_job("long_job")],
        resources={"air_workspace": workspace},
    )


def long_job() -> dg.JobDefinition:
    return _definitions().resolve_job_def("long_job")


if __name__ == "__main__":
    executor = sys.argv[1]  # "in_process" or "multiprocess"
    with dg.DagsterInstance.get() as instance:
        result = dg.execute_job(
            dg.reconstructable(long_job),
            instance=instance,
            run_config={"execution": {"config": {executor: {}}}},
        )
    sys.exit(0 if result.success else 1)
