"""The code location of tests/e2e/test_dagster_run_retries.py: one asset whose training holds
its GPU until the test lets it go, in a job whose runs are retried (``dagster/max_retries``)
and failed by run monitoring once they outlive ``dagster/max_runtime``: a run worker killed
while it waits is failed (by the code server that started it, or by run monitoring) and
retried by the retries daemon. Its step runs in a subprocess of the run worker (Dagster's
default multiprocess executor), which outlives a run worker killed with SIGKILL. A trainer
that checkpoints every 10 steps, in a job whose runs are retried too. And a 4-partition
sweep backfilled as one run, whose partition ``c`` runs out of GPU memory once."""

from __future__ import annotations

import os
import time
from pathlib import Path

import dagster as dg
from dagster._core.storage.tags import RETRY_NUMBER_TAG

from dagster_air import AirInvocation, AirStage, AirWorkspace, air_workload_asset, build_air_assets

# Every training appends to a file the test reads: trainings are counted by what ranks did,
# per Dagster run they belong to (a run retry's ranks name the run it continues).
HELD_TRAINER = """\
echo started >> "$COUNT_DIR/trained_$AIRO_ORCHESTRATOR_RUN_ID"
while [ ! -e "$COUNT_DIR/release" ]; do sleep 0.2; done
"""

held = build_air_assets(
    AirStage(
        key="held",
        workload={
            "experiment_name": "held",
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
            "max_retries": 0,
            "command": HELD_TRAINER,
            "env_variables": {"COUNT_DIR": os.environ["COUNT_DIR"]},
        },
    )
)

# Checkpoints every 10 steps into AIRO_CHECKPOINT_DIR (a file ``step-<n>``) and resumes from
# the newest one there. Each execution appends its first step to ``starts``, its folder to
# ``dirs`` and its resume variables to ``resume``, under CHECKPOINTED_DIR; the first one to
# reach step 73 stays there (touching ``at73``) until the test takes its node away.
CHECKPOINTED_DIR = os.path.join(os.environ["COUNT_DIR"], "checkpointed")
CHECKPOINTING_TRAINER = (Path(__file__).parents[2] / "checkpointing_trainer.sh").read_text()


@air_workload_asset(
    workload={
        "experiment_name": "checkpointed",
        "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
        "max_retries": 0,  # the platform does not retry a lost node: the run fails
        "command": CHECKPOINTING_TRAINER,
        "env_variables": {"COUNT_DIR": CHECKPOINTED_DIR},
    },
    resource_key="air_checkpoints",
)
def checkpointed(context: dg.AssetExecutionContext, air: AirInvocation):
    # A run retry goes on once the test took the node of its parent's GPU run (the file
    # ``node_lost``), so that it finds that run failed instead of adopting it still training.
    if RETRY_NUMBER_TAG in context.run.tags:
        while not Path(CHECKPOINTED_DIR, "node_lost").exists():
            time.sleep(0.2)
    yield from air.run()


SWEEP_TRAINER = """\
echo "$DAGSTER_PARTITION_KEY" >> "$COUNT_DIR/swept"
if [ "$DAGSTER_PARTITION_KEY" = c ] && [ ! -e "$COUNT_DIR/oom_once" ]; then
  touch "$COUNT_DIR/oom_once"
  echo "torch.OutOfMemoryError: CUDA out of memory"
  exit 1
fi
"""

sweep = build_air_assets(
    AirStage(
        key="sweep",
        workload={
            "experiment_name": "sweep",
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
            "max_retries": 0,
            "command": SWEEP_TRAINER,
            "env_variables": {"COUNT_DIR": os.environ["COUNT_DIR"]},
        },
    ),
    partitions_def=dg.StaticPartitionsDefinition(["a", "b", "c", "d"]),
    backfill_policy=dg.BackfillPolicy.single_run(),
)

defs = dg.Definitions(
    assets=[held, checkpointed, sweep],
    jobs=[
        dg.define_asset_job(
            "held_job",
            selection=[held],
            tags={"dagster/max_retries": "1", "dagster/max_runtime": os.environ["MAX_RUNTIME"]},
        ),
        # No max_runtime: the code server sees its run worker die, and a retry held until
        # the node is lost must not be failed by run monitoring meanwhile.
        dg.define_asset_job(
            "checkpointed_job", selection=[checkpointed], tags={"dagster/max_retries": "1"}
        ),
    ],
    resources={
        "air_workspace": AirWorkspace(
            host=dg.EnvVar("AIRO_HOST"), token=dg.EnvVar("AIRO_TOKEN"), poll_interval=0.5
        ),
        "air_checkpoints": AirWorkspace(
            host=dg.EnvVar("AIRO_HOST"),
            token=dg.EnvVar("AIRO_TOKEN"),
            poll_interval=0.5,
            checkpoint_volume="/Volumes/main/ml/checkpoints",
        ),
    },
)
