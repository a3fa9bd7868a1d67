"""Two independent GPU assets, each its own step and its own remote run, for the check that
each step's logs hold only its own run's lines. The workspace comes from ROUTING_HOST and
ROUTING_TOKEN (the step processes of the multiprocess executor inherit them). With
ROUTING_MEET set (a folder), each run's rank marks its start there and prints its lines only
once the other run has started too: the two runs overlap, or fail after two minutes."""

from __future__ import annotations

import os

import dagster as dg

from dagster_air import AirStage, AirWorkspace, build_air_assets

NAMES = ("left", "right")


def _stage(name: str) -> AirStage:
    lines = "".join(f'echo "line {i} of {name}"\nsleep 1\n' for i in range(4))
    meet = os.environ.get("ROUTING_MEET")
    if meet:
        (other,) = (n for n in NAMES if n != name)
        lines = (
            f'touch "{meet}/{name}"\n'
            f'for i in $(seq 1200); do [ -e "{meet}/{other}" ] && break; sleep 0.1; done\n'
            f'[ -e "{meet}/{other}" ] || exit 1\n'
        ) + lines
    return AirStage(
        key=name,
        workload={
            "experiment_name": name,
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
            "max_retries": 0,
            "command": lines,
        },
    )


def routing_job() -> dg.JobDefinition:
    definitions = dg.Definitions(
        assets=[build_air_assets(_stage(name)) for name in NAMES],
        jobs=[dg.define_asset_job("routing_job")],
        resources={
            "air_workspace": AirWorkspace(
                host=dg.EnvVar("ROUTING_HOST"),
                token=dg.EnvVar("ROUTING_TOKEN"),
                poll_interval=0.2,
                request_budget=50,
            )
        },
    )
    return definitions.resolve_job_def("routing_job")
