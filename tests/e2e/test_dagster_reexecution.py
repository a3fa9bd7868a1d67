"""A 4-partition sweep backfilled as one run through the daemon (webserver and daemon on
PostgreSQL), partition ``c`` out of GPU memory once, re-executed from failure the way the
UI does it (GraphQL ``launchRunReexecution``, FROM_FAILURE): exactly the failed partition is
trained again, and all four are materialized after. Then the failed backfill itself is
re-executed from failure (the backfill page's button): it asks for the failed partition
again, which the run's re-execution already trained, so it is recorded as done and not
trained a third time. Trainings are counted by what the ranks wrote."""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster_deployment import DagsterDeployment

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

DEFINITIONS = Path(__file__).with_name("dagster_recovery") / "definitions.py"
LOCATION = "air_recovery"
KEYS = ["a", "b", "c", "d"]

# What the UI's "Re-execute from failure" sends.
REEXECUTE = """
mutation Reexecute($params: ReexecutionParams!) {
  launchRunReexecution(reexecutionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message stack }
    ... on Error { message }
  }
}
"""

MATERIALIZED = """
query Materialized {
  assetOrError(assetKey: {path: ["sweep"]}) {
    ... on Asset { definition { partitionStats { numMaterialized } } }
  }
}
"""


def test_a_backfill_run_reexecuted_from_failure_trains_only_the_failed_partition(
    tmp_path: Path, postgres: str, local_workspace
):
    count_dir = tmp_path / "count"
    count_dir.mkdir()
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
        extra_env={
            "AIRO_HOST": local_workspace.host,
            "AIRO_TOKEN": local_workspace.token,
            "COUNT_DIR": str(count_dir),
            "MAX_RUNTIME": "600",
        },
    )
    swept = count_dir / "swept"
    try:
        deployment.start()
        backfill = deployment.backfill("sweep", KEYS, timeout=180)
        (run,) = backfill["runs"]  # one run over the four partitions
        parent = run["runId"]
        status, _ = deployment.wait_for_run(parent, timeout=120)
        assert status == "FAILURE"
        assert sorted(swept.read_text().split()) == KEYS  # one training each, c failed

        reexecuted = deployment.graphql(
            REEXECUTE, {"params": {"parentRunId": parent, "strategy": "FROM_FAILURE"}}
        )["launchRunReexecution"]
        assert reexecuted["__typename"] == "LaunchRunSuccess", reexecuted
        child = reexecuted["run"]["runId"]
        status, _ = deployment.wait_for_run(child, timeout=180)
        assert status == "SUCCESS", deployment.run_messages(child)

        assert sorted(swept.read_text().split()) == sorted([*KEYS, "c"])  # c alone again
        assert local_workspace.admin.counters()["runs_created"] == 2
        stats = deployment.graphql(MATERIALIZED)["assetOrError"]["definition"]["partitionStats"]
        assert stats["numMaterialized"] == 4
        assert f"already materialized by run {parent}" in deployment.run_messages(child, 300)

        # The other button: the failed backfill re-executed from failure asks for c again.
        again = deployment.reexecute_backfill(backfill["id"], "FROM_FAILURE", timeout=180)
        (rerun,) = again["runs"]
        assert rerun["status"] == "SUCCESS", deployment.run_messages(rerun["runId"])
        assert f"already materialized by run {child}" in deployment.run_messages(rerun["runId"])
        assert sorted(swept.read_text().split()) == sorted([*KEYS, "c"])  # not trained again
        assert local_workspace.admin.counters()["runs_created"] == 2
    finally:
        deployment.stop()
