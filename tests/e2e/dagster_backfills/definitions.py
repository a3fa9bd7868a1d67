"""The code location of tests/e2e/test_dagster_backfills.py: a learning-rate sweep backfilled
as one run over its range, and trials backfilled two partitions per run."""

from __future__ import annotations

import dagster as dg

from dagster_air import AirStage, AirWorkspace, build_air_assets

SWEEP = {"lr=0.1": {"lr": 0.1}, "lr=0.2": {"lr": 0.2}, "lr=0.3": {"lr": 0.3}}
TRIALS = [f"trial-{i}" for i in range(5)]

# Reports, through Pipes, the partition its context names and the lr it read.
TRAINER = """\
cat hyperparameters.yaml
python - <<'PY'
import yaml
from dagster_pipes import open_dagster_pipes

lr = yaml.safe_load(open("hyperparameters.yaml"))["lr"]
with open_dagster_pipes() as pipes:
    pipes.report_asset_materialization(metadata={"trained_lr": lr, "seen_partition": pipes.partition_key})
PY
"""


def _workload(name: str, command: str) -> dict[str, object]:
    return {
        "experiment_name": name,
        "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
        "max_retries": 0,
        "command": command,
    }


sweep = build_air_assets(
    AirStage(key="sweep", workload=_workload("sweep", TRAINER)),
    partitions_def=dg.StaticPartitionsDefinition(list(SWEEP)),
    partition_parameters=SWEEP,
    backfill_policy=dg.BackfillPolicy.single_run(),
)

trials = build_air_assets(
    AirStage(key="trials", workload=_workload("trials", 'echo "trial $DAGSTER_PARTITION_KEY"')),
    partitions_def=dg.StaticPartitionsDefinition(TRIALS),
    backfill_policy=dg.BackfillPolicy.multi_run(2),
)

defs = dg.Definitions(
    assets=[sweep, trials],
    resources={
        "air_workspace": AirWorkspace(
            host=dg.EnvVar("AIRO_HOST"), token=dg.EnvVar("AIRO_TOKEN"), poll_interval=0.5
        )
    },
)
