"""Runs say whose they are: a partition's run is named after its job, asset and partition
key, and its ranks get the Dagster ids as variables."""

from __future__ import annotations

import dagster as dg
from dagster_checks import workload

from air_runtime import AirClient
from dagster_air import AirStage, build_air_assets


def _env(path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def test_a_partition_names_its_run_and_tells_its_ranks(
    air_workspace, instance, local_workspace, tmp_path
):
    assets = build_air_assets(
        AirStage(
            key="sweep",
            workload=workload("identity_sweep", f'env > "{tmp_path}/env_$AIRO_PARTITION_KEY"'),
        ),
        partitions_def=dg.StaticPartitionsDefinition(["lr-small", "lr-large"]),
    )
    result = dg.materialize(
        [assets],
        partition_key="lr-large",
        resources={"air_workspace": air_workspace},
        instance=instance,
    )
    assert result.success
    (mat,) = result.asset_materializations_for_node("sweep")
    run_id = mat.metadata["dagster-air/run_id"].value
    with AirClient(local_workspace.host, local_workspace.token) as client:
        name = client.get_run(run_id).run_name
    # The job's name loses the underscores around it (__ephemeral_asset_job__).
    assert name == f"identity_sweep--{result.job_def.name.strip('_')}--sweep--lr-large"
    env = _env(tmp_path / "env_lr-large")
    assert env["AIRO_ORCHESTRATOR"] == "dagster"
    assert env["AIRO_PIPELINE"] == result.job_def.name
    assert env["AIRO_TASK"] == "sweep"
    assert env["AIRO_PARTITION_KEY"] == "lr-large"
    assert env["AIRO_ORCHESTRATOR_RUN_ID"] == result.run_id
    assert "AIRO_MAP_INDEX" not in env


def test_each_partition_of_a_range_run_tells_its_ranks_its_own_key(
    air_workspace, instance, local_workspace, tmp_path
):
    assets = build_air_assets(
        AirStage(
            key="range_sweep",
            workload=workload("identity_range", f'env > "{tmp_path}/env_$DAGSTER_PARTITION_KEY"'),
        ),
        partitions_def=dg.StaticPartitionsDefinition(["lr-small", "lr-large"]),
        backfill_policy=dg.BackfillPolicy.single_run(),
    )
    result = dg.materialize(
        [assets],
        resources={"air_workspace": air_workspace},
        instance=instance,
        tags={
            "dagster/asset_partition_range_start": "lr-small",
            "dagster/asset_partition_range_end": "lr-large",
        },
    )
    assert result.success
    mats = result.asset_materializations_for_node("range_sweep")
    assert {m.partition for m in mats} == {"lr-small", "lr-large"}
    (run_id,) = {m.metadata["dagster-air/run_id"].value for m in mats}
    with AirClient(local_workspace.host, local_workspace.token) as client:
        name = client.get_run(run_id).run_name
    # One remote run for the range, a workflow named after the op: its first...last key.
    job = result.job_def.name.strip("_")
    assert name == f"range_sweep--{job}--range_sweep--lr-small_lr-large"
    for key in ("lr-small", "lr-large"):
        env = _env(tmp_path / f"env_{key}")
        assert env["AIRO_PARTITION_KEY"] == key  # its own, not the range's
        assert env["AIRO_TASK"] == "range_sweep"
        assert env["AIRO_ORCHESTRATOR_RUN_ID"] == result.run_id
