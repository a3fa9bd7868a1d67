"""Where a blocking check splits a workflow: each stage's wave is the number of stages with a
blocking check on its longest path of upstream stages (``_plan.stage_waves``)."""

from __future__ import annotations

import dagster as dg

from air_runtime import load_workload
from dagster_air import AirStage
from dagster_air._plan import stage_waves
from dagster_air._workflow import LoadedStage

WORKLOAD = load_workload(
    {
        "experiment_name": "exp",
        "command": "echo hi",
        "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
    }
)


def _stages(deps: dict[str, tuple[str, ...]]) -> list[LoadedStage]:
    return [
        LoadedStage(AirStage(key=k, workload=WORKLOAD, depends_on=d), WORKLOAD, dg.AssetKey(k))
        for k, d in deps.items()
    ]


def test_each_blocking_check_along_a_chain_starts_a_wave():
    stages = _stages(
        {
            "prep": (),
            "side": (),
            "train": ("prep",),
            "merge": ("prep", "side"),
            "evaluate": ("train",),
            "report": ("evaluate", "side"),
        }
    )
    waves = stage_waves(stages, gated={"prep", "train"})
    assert waves == {"prep": 0, "side": 0, "train": 1, "merge": 1, "evaluate": 2, "report": 2}


def test_without_a_blocking_check_everything_is_one_wave():
    stages = _stages({"prep": (), "train": ("prep",), "evaluate": ("train",)})
    assert set(stage_waves(stages, gated=set()).values()) == {0}
    # A check on the last stage gates nothing.
    assert set(stage_waves(stages, gated={"evaluate"}).values()) == {0}


def test_a_stage_not_planned_splits_nothing():
    # prep kept (not planned): train reads where it wrote and runs in the first wave.
    stages = _stages({"train": ("prep",), "evaluate": ("train",)})
    assert stage_waves(stages, gated={"prep"}) == {"train": 0, "evaluate": 0}
