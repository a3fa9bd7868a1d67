"""A job for the checkpoint tests, importable by ``dg.reconstructable`` (a re-execution runs
a job Dagster can load again): a trainer that checkpoints every 10 steps into
``AIRO_CHECKPOINT_DIR`` (a file ``step-<n>``) and resumes from the newest checkpoint there; its first execution
stops at step 73 until the test takes its node away. Each execution appends its first step to
``$COUNT_DIR/starts``, its folder to ``$COUNT_DIR/dirs`` and its resume variables to
``$COUNT_DIR/resume`` (the run config's ``env``, which
re-executions keep)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from dagster_checks import workload

from dagster_air import AirStage, AirWorkspace, build_air_assets

# Shared with the run-retry test's code location (tests/e2e/dagster_recovery).
TRAINER = (Path(__file__).parents[1] / "checkpointing_trainer.sh").read_text()


def run_config(count_dir: str) -> dict:
    return {"ops": {"ckpt": {"config": {"env": {"COUNT_DIR": count_dir}}}}}


def checkpoint_job() -> dg.JobDefinition:
    return _job(None)


def _job(code_version: str | None) -> dg.JobDefinition:
    attributes = {"code_version": code_version} if code_version else {}
    assets = build_air_assets(
        AirStage(key="ckpt", workload=workload("ckpt", TRAINER), asset_attributes=attributes)
    )
    defs = dg.Definitions(
        assets=[assets],
        jobs=[dg.define_asset_job("checkpoint_job", executor_def=dg.in_process_executor)],
        resources={
            "air_workspace": AirWorkspace(
                host=dg.EnvVar("AIRO_HOST"),
                token=dg.EnvVar("AIRO_TOKEN"),
                poll_interval=0.2,
                checkpoint_volume="/Volumes/main/ml/checkpoints",
            )
        },
    )
    return defs.resolve_job_def("checkpoint_job")


def checkpoint_job_new_code() -> dg.JobDefinition:
    """The same job after a code change: its asset's code_version is another."""
    return _job("trainer-v2")
