"""Backfills through the Dagster daemon (webserver and daemon on PostgreSQL): a single-run
backfill of a three-key sweep trains each partition in its own task of one remote run, and a
multi_run(2) backfill of five keys makes three runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from dagster_deployment import DagsterDeployment

from air_runtime import AirClient

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

DEFINITIONS = Path(__file__).with_name("dagster_backfills") / "definitions.py"
LOCATION = "air_backfills"

PARTITION_MATERIALIZATIONS = """
query Materializations($runId: ID!) {
  runOrError(runId: $runId) {
    ... on Run {
      assetMaterializations {
        partition
        assetKey { path }
        metadataEntries {
          label
          ... on TextMetadataEntry { text }
          ... on IntMetadataEntry { intValue }
          ... on FloatMetadataEntry { floatValue }
        }
      }
    }
  }
}
"""


def _backfill(deployment: DagsterDeployment, asset: str, partitions: list[str]) -> list[dict]:
    """Launch a backfill of ``partitions`` of ``asset``; its runs once the daemon says it
    ended (it starts them, as from the UI)."""
    backfill = deployment.backfill(asset, partitions, timeout=600)
    assert backfill["status"] in ("COMPLETED", "COMPLETED_SUCCESS"), (
        backfill,
        [deployment.run_messages(r["runId"]) for r in backfill["runs"]],
    )
    return backfill["runs"]


def _partitions(deployment: DagsterDeployment, run_id: str) -> dict[str, dict[str, Any]]:
    run = deployment.graphql(PARTITION_MATERIALIZATIONS, {"runId": run_id})["runOrError"]
    found = {}
    for event in run["assetMaterializations"]:
        values = {
            e["label"]: next((v for k, v in e.items() if k != "label"), None)
            for e in event["metadataEntries"]
        }
        found[event["partition"]] = values
    return found


def test_range_backfills_through_the_daemon(tmp_path: Path, postgres: str, local_workspace):
    deployment = DagsterDeployment(
        tmp_path,
        database_dsn=f"{postgres}/airo_dagster",  # the deployments run one at a time
        code_location={
            "python_file": {
                "relative_path": str(DEFINITIONS),
                "working_directory": str(DEFINITIONS.parent),
                "location_name": LOCATION,
            }
        },
        extra_env={"AIRO_HOST": local_workspace.host, "AIRO_TOKEN": local_workspace.token},
    )
    counters = local_workspace.admin.counters
    try:
        deployment.start()

        # One Dagster run over the three keys; one remote run with a task per key.
        created = counters()["runs_created"]
        (run,) = _backfill(deployment, "sweep", ["lr=0.1", "lr=0.2", "lr=0.3"])
        assert counters()["runs_created"] - created == 1
        partitions = _partitions(deployment, run["runId"])
        assert set(partitions) == {"lr=0.1", "lr=0.2", "lr=0.3"}
        for key, metadata in partitions.items():
            assert metadata["trained_lr"] == float(key.split("=")[1])
            assert metadata["seen_partition"] == key
        (remote_id,) = {m["dagster-air/run_id"] for m in partitions.values()}
        assert len({m["dagster-air/task_run_id"] for m in partitions.values()}) == 3
        with AirClient(local_workspace.host, local_workspace.token) as client:
            tasks = client.get_run(remote_id).tasks
        assert len(tasks) == 3 and all(t.is_success for t in tasks)

        # Five keys, two per run: three Dagster runs (2 + 2 + 1), three remote runs.
        created = counters()["runs_created"]
        trials = [f"trial-{i}" for i in range(5)]
        runs = _backfill(deployment, "trials", trials)
        assert len(runs) == 3
        assert counters()["runs_created"] - created == 3
        materialized: dict[str, dict[str, Any]] = {}
        for run in runs:
            materialized.update(_partitions(deployment, run["runId"]))
        assert set(materialized) == set(trials)
        assert len({m["dagster-air/run_id"] for m in materialized.values()}) == 3
    finally:
        deployment.stop()
