"""Runs say whose they are: a partition's run is named after its job, the Dagster run, the
asset and the partition key (encoded reversibly), shown by airo get, airo list and the run
page, and its ranks get the Dagster ids as variables."""

from __future__ import annotations

import html
import json

import dagster as dg
import httpx
from dagster_checks import workload

from air_runtime import AirClient, decode_name_part
from air_runtime.cli import main as airo
from dagster_air import AirStage, build_air_assets


def _env(path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def test_a_partition_names_its_run_and_tells_its_ranks(
    air_workspace, instance, local_workspace, tmp_path, monkeypatch, capsys
):
    assets = build_air_assets(
        AirStage(
            key="sweep",
            workload=workload("identity_sweep", f'env > "{tmp_path}/env_$AIRO_PARTITION_KEY"'),
        ),
        partitions_def=dg.StaticPartitionsDefinition(["lr-0.01", "lr-0.05"]),
    )
    result = dg.materialize(
        [assets],
        partition_key="lr-0.05",
        resources={"air_workspace": air_workspace},
        instance=instance,
    )
    assert result.success
    (mat,) = result.asset_materializations_for_node("sweep")
    run_id = mat.metadata["dagster-air/run_id"].value
    with AirClient(local_workspace.host, local_workspace.token) as client:
        run = client.get_run(run_id)
    name = run.run_name
    # The job's name loses the underscores around it (__ephemeral_asset_job__).
    # Then the Dagster run, in the short form Dagster's UI shows (its first 8 characters),
    # and the partition key, its "." encoded (not mangled): the name gives it back.
    job = result.job_def.name.strip("_")
    assert name == f"identity_sweep--{job}--{result.run_id[:8]}--sweep--lr-0_2e05"
    assert decode_name_part(name.split("--")[-1]) == "lr-0.05"
    # airo get and airo list show it; airo list finds the run by the Dagster run's id.
    monkeypatch.setenv("DATABRICKS_HOST", local_workspace.host)
    monkeypatch.setenv("DATABRICKS_TOKEN", local_workspace.token)
    capsys.readouterr()
    assert airo(["get", str(run_id)]) == 0
    assert f"Run name:      {name}\n" in capsys.readouterr().out
    assert airo(["list", "--all-status"]) == 0
    assert any(line.endswith(name) for line in capsys.readouterr().out.splitlines())
    assert airo(["list", "--all-status", "--json", "--filter", f"name=*{result.run_id[:8]}*"]) == 0
    assert [int(r["run_id"]) for r in json.loads(capsys.readouterr().out)["runs"]] == [run_id]
    # So does the run page.
    page = httpx.get(
        run.run_page_url, headers={"Authorization": f"Bearer {local_workspace.token}"}
    ).text
    assert html.escape(name) in page
    env = _env(tmp_path / "env_lr-0.05")
    assert env["AIRO_ORCHESTRATOR"] == "dagster"
    assert env["AIRO_PIPELINE"] == result.job_def.name
    assert env["AIRO_TASK"] == "sweep"
    assert env["AIRO_PARTITION_KEY"] == "lr-0.05"
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
    # One remote run for the range, a workflow named after the op: its first and last keys
    # and how many partitions it trains.
    job = result.job_def.name.strip("_")
    assert name == (
        f"range_sweep--{job}--{result.run_id[:8]}--range_sweep--lr-small_to_lr-large_2keys"
    )
    for key in ("lr-small", "lr-large"):
        env = _env(tmp_path / f"env_{key}")
        assert env["AIRO_PARTITION_KEY"] == key  # its own, not the range's
        assert env["AIRO_TASK"] == "range_sweep"
        assert env["AIRO_ORCHESTRATOR_RUN_ID"] == result.run_id
