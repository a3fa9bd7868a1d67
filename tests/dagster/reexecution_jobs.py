"""A job for the re-execution tests, importable by ``dg.reconstructable`` (a re-execution
runs a job Dagster can load again): a 4-partition sweep backfilled as one run, whose
partition ``c`` runs out of GPU memory once. Every training appends its partition key to
``$COUNT_DIR/trained`` (the run config's ``env``, which re-executions keep), so the tests
count trainings by what the ranks did."""

from __future__ import annotations

import dagster as dg
from dagster_checks import workload

from dagster_air import AirStage, AirWorkspace, build_air_assets

KEYS = ["a", "b", "c", "d"]

TRAINER = """\
echo "$DAGSTER_PARTITION_KEY" >> "$COUNT_DIR/trained"
if [ "$DAGSTER_PARTITION_KEY" = c ] && [ ! -e "$COUNT_DIR/oom_once" ]; then
  touch "$COUNT_DIR/oom_once"
  echo "torch.OutOfMemoryError: CUDA out of memory"
  exit 1
fi
"""


def run_config(count_dir: str) -> dict:
    return {"ops": {"sweep": {"config": {"env": {"COUNT_DIR": count_dir}}}}}


def sweep_job() -> dg.JobDefinition:
    assets = build_air_assets(
        AirStage(
            key="sweep",
            workload=workload("sweep", TRAINER),
        ),
        partitions_def=dg.StaticPartitionsDefinition(KEYS),
        backfill_policy=dg.BackfillPolicy.single_run(),
    )
    defs = dg.Definitions(
        assets=[assets],
        jobs=[dg.define_asset_job("sweep_job", executor_def=dg.in_process_executor)],
        resources={
            "air_workspace": AirWorkspace(
                host=dg.EnvVar("AIRO_HOST"), token=dg.EnvVar("AIRO_TOKEN"), poll_interval=0.2
            )
        },
    )
    return defs.resolve_job_def("sweep_job")


# A training that holds its GPU until the test lets it go (the file ``release``), so the
# test can kill the run worker while it waits.
HELD_TRAINER = """\
echo started >> "$COUNT_DIR/trained"
while [ ! -e "$COUNT_DIR/release" ]; do sleep 0.1; done
"""


def held_job() -> dg.JobDefinition:
    assets = build_air_assets(AirStage(key="held", workload=workload("held", HELD_TRAINER)))
    defs = dg.Definitions(
        assets=[assets],
        jobs=[dg.define_asset_job("held_job", executor_def=dg.in_process_executor)],
        resources={
            "air_workspace": AirWorkspace(
                host=dg.EnvVar("AIRO_HOST"), token=dg.EnvVar("AIRO_TOKEN"), poll_interval=0.2
            )
        },
    )
    return defs.resolve_job_def("held_job")


def held_config(count_dir: str) -> dict:
    return {"ops": {"held": {"config": {"env": {"COUNT_DIR": count_dir}}}}}


# A two-stage workflow (one multi-task run): prep, then train, which runs out of GPU memory
# once. Each stage appends its name to the count file.
PREP = 'echo prep >> "$COUNT_DIR/trained"\n'
TRAIN = """\
echo train >> "$COUNT_DIR/trained"
if [ ! -e "$COUNT_DIR/oom_once" ]; then
  touch "$COUNT_DIR/oom_once"
  echo "torch.OutOfMemoryError: CUDA out of memory"
  exit 1
fi
"""


def workflow_job() -> dg.JobDefinition:
    assets = build_air_assets(
        [
            AirStage(key="prep", workload=workload("prep", PREP)),
            AirStage(key="train", workload=workload("train", TRAIN), depends_on=["prep"]),
        ],
        name="pipeline",
    )
    defs = dg.Definitions(
        assets=[assets],
        jobs=[dg.define_asset_job("workflow_job", executor_def=dg.in_process_executor)],
        resources={
            "air_workspace": AirWorkspace(
                host=dg.EnvVar("AIRO_HOST"), token=dg.EnvVar("AIRO_TOKEN"), poll_interval=0.2
            )
        },
    )
    return defs.resolve_job_def("workflow_job")


def workflow_config(count_dir: str) -> dict:
    return {"ops": {"pipeline": {"config": {"env": {"COUNT_DIR": count_dir}}}}}


# The held asset after a deploy that changed it: another experiment, so another task (what a
# retry of a run started before the deploy cannot adopt).
def held_job_changed() -> dg.JobDefinition:
    changed = workload("held_v2", 'echo started_v2 >> "$COUNT_DIR/trained"\n')
    assets = build_air_assets(AirStage(key="held", workload=changed))
    defs = dg.Definitions(
        assets=[assets],
        jobs=[dg.define_asset_job("held_job", executor_def=dg.in_process_executor)],
        resources={
            "air_workspace": AirWorkspace(
                host=dg.EnvVar("AIRO_HOST"), token=dg.EnvVar("AIRO_TOKEN"), poll_interval=0.2
            )
        },
    )
    return defs.resolve_job_def("held_job")


# A workflow split at a blocking check, over a range of two partitions: prepare's check fails
# for "bad", so only good's evaluate is submitted, in a second run, where it holds its GPU
# until released. Each stage appends "<stage>-<partition>" to the count file.
CHECKED_KEYS = ["bad", "good"]
CHECKED_RANGE = {
    "dagster/asset_partition_range_start": CHECKED_KEYS[0],
    "dagster/asset_partition_range_end": CHECKED_KEYS[-1],
}
CHECKED_PREPARE = """\
echo "prepare-$DAGSTER_PARTITION_KEY" >> "$COUNT_DIR/trained"
python -c 'import os
from dagster_pipes import open_dagster_pipes
with open_dagster_pipes() as pipes:
    pipes.report_asset_check("data_valid", passed=pipes.partition_key != "bad")'
"""
HELD_EVALUATE = """\
echo "evaluate-$DAGSTER_PARTITION_KEY" >> "$COUNT_DIR/trained"
while [ ! -e "$COUNT_DIR/release" ]; do sleep 0.1; done
"""


def checked_job() -> dg.JobDefinition:
    assets = build_air_assets(
        [
            AirStage(
                key="prepare",
                workload=workload("prepare", CHECKED_PREPARE),
                check_specs=[{"name": "data_valid", "blocking": True}],
            ),
            AirStage(
                key="evaluate", workload=workload("evaluate", HELD_EVALUATE), depends_on=["prepare"]
            ),
        ],
        name="checked",
        partitions_def=dg.StaticPartitionsDefinition(CHECKED_KEYS),
        backfill_policy=dg.BackfillPolicy.single_run(),
    )
    defs = dg.Definitions(
        assets=[assets],
        jobs=[dg.define_asset_job("checked_job", executor_def=dg.in_process_executor)],
        resources={
            "air_workspace": AirWorkspace(
                host=dg.EnvVar("AIRO_HOST"), token=dg.EnvVar("AIRO_TOKEN"), poll_interval=0.2
            )
        },
    )
    return defs.resolve_job_def("checked_job")


def checked_config(count_dir: str) -> dict:
    return {"ops": {"checked": {"config": {"env": {"COUNT_DIR": count_dir}}}}}


if (
    __name__ == "__main__"
):  # a run worker the test can kill: python reexecution_jobs.py DIR [checked]
    import sys

    with dg.DagsterInstance.get() as instance:
        if sys.argv[2:] == ["checked"]:
            dg.execute_job(
                dg.reconstructable(checked_job),
                instance,
                run_config=checked_config(sys.argv[1]),
                tags=CHECKED_RANGE,
            )
        else:
            dg.execute_job(
                dg.reconstructable(held_job), instance, run_config=held_config(sys.argv[1])
            )
