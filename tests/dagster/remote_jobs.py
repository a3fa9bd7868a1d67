"""A job run in its own process by the termination and crash tests, the way a Dagster run
worker runs it: ``python remote_jobs.py <executor>`` with DAGSTER_HOME, AIRO_HOST,
AIRO_TOKEN, AIR_TEST_COMMAND and AIR_TEST_RETRIES in the environment. Optional:
AIR_TEST_RUN_ID (the Dagster run id, e.g. the same in two instances), AIR_TEST_PARTITIONS
and AIR_TEST_PARTITION (a static partitions definition and the partition to run),
AIR_TEST_SECRET (secret_env HF_TOKEN from the variable TEST_HF_TOKEN)."""

from __future__ import annotations

import os
import sys

import dagster as dg

from dagster_air import AirStage, AirWorkspace, build_air_assets


def _definitions() -> dg.Definitions:
    partitions = os.environ.get("AIR_TEST_PARTITIONS")
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
        partitions_def=dg.StaticPartitionsDefinition(partitions.split(",")) if partitions else None,
        secret_env={"HF_TOKEN": dg.EnvVar("TEST_HF_TOKEN")}
        if os.environ.get("AIR_TEST_SECRET")
        else None,
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
    run_config = {"execution": {"config": {executor: {}}}}
    run_id = os.environ.get("AIR_TEST_RUN_ID")
    partition = os.environ.get("AIR_TEST_PARTITION")
    with dg.DagsterInstance.get() as instance:
        if run_id or partition:
            from dagster._core.execution.api import execute_run

            job = dg.reconstructable(long_job)
            dagster_run = instance.create_run_for_job(
                job.get_definition(),
                run_id=run_id,
                run_config=run_config,
                tags={"dagster/partition": partition} if partition else None,
                job_code_origin=job.get_python_origin(),
            )
            result = execute_run(job, dagster_run, instance)
        else:
            result = dg.execute_job(
                dg.reconstructable(long_job), instance=instance, run_config=run_config
            )
    sys.exit(0 if result.success else 1)
