"""A backfill of mixed sizes capped in accelerators on a real Dagster deployment (webserver
and daemon on PostgreSQL, runs queued and launched by the daemon, four at once): the
partitions of ``sweep`` ask for 1 or 2 accelerators (6 in all) of a GPU pool of 4, through
the accelerator pool ``gpu-a10``. The workspace's pool ledger shows the GPU pool was never
asked for more than 4 accelerators at once and no attempt waited for capacity at the
platform; the steps waited for their accelerators in Dagster, before submitting. Each
remote run is named after its asset and partition.

Then, in the same deployment, ``range_sweep``: six partitions of 1 and 2 accelerators (9 in
all) backfilled as one run (``BackfillPolicy.single_run()``) on the same pool of 4: queued
within that run, never asking for more than 4, each partition trained once at its size
(counted by what its ranks wrote)."""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster_deployment import DagsterDeployment
from managed_process import own_database, wait_for

from air_runtime import AirClient, decode_name_part

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

# The code location: tests/dagster/accelerator_jobs.py (its ``defs``).
DEFINITIONS = Path(__file__).parents[1] / "dagster" / "accelerator_jobs.py"
LOCATION = "air_accelerator_caps"
PARTITIONS = {"lr-0.1": 1, "lr-0.03": 2, "lr-0.01": 1, "lr-0.003": 2}
RANGE = {"lr-0.1": 1, "lr-0.05": 2, "lr-0.03": 1, "lr-0.01": 2, "lr-0.005": 1, "lr-0.001": 2}


def test_a_mixed_backfill_never_asks_the_gpu_pool_for_more_than_it_reserves(
    tmp_path: Path, postgres: str
) -> None:
    from air_runtime.local import start_local_workspace

    gpu_pool = {"pool_id": "pool-a10", "accelerator_type": "GPU_1xA10", "accelerator_count": 4}
    workspace = start_local_workspace(data_dir=tmp_path / "workspace", gpu_pools=[gpu_pool])
    ranks = tmp_path / "ranks"
    hold = tmp_path / "release"
    deployment = DagsterDeployment(
        tmp_path,
        database_dsn=own_database(postgres, "airo_dagster_accelerator_caps"),
        code_location={
            "python_file": {
                "relative_path": str(DEFINITIONS),
                "working_directory": str(DEFINITIONS.parent),
                "location_name": LOCATION,
            }
        },
        extra_env={
            "AIRO_HOST": workspace.host,
            "AIRO_TOKEN": workspace.token,
            "RANKS_FILE": str(ranks),
            "HOLD_FILE": str(hold),
        },
        # Every partition's run at once: only the accelerator pool holds them back.
        instance_settings={
            "run_coordinator": {
                "module": "dagster._core.run_coordinator",
                "class": "QueuedRunCoordinator",
                "config": {"max_concurrent_runs": len(PARTITIONS)},
            }
        },
    )
    try:
        deployment.start()
        backfill_id = deployment.launch_backfill("sweep", list(PARTITIONS))
        # Every trial holds its accelerators until released: with 6 asked of 4, a step
        # waits for its accelerators in Dagster, before submitting. Released once one says so.
        wait_for(
            lambda: any(
                "waiting for" in deployment.run_messages(r["runId"], last=300)
                for r in deployment.backfill_runs(backfill_id)
            ),
            timeout=600,
            what="a step of the backfill waiting for its accelerators",
            processes=deployment.processes,
        )
        hold.touch()
        backfill = deployment.wait_for_backfill(backfill_id, timeout=600)
        runs = backfill["runs"]
        messages = {r["runId"]: deployment.run_messages(r["runId"], last=300) for r in runs}
        assert backfill["status"] in ("COMPLETED", "COMPLETED_SUCCESS"), (backfill, messages)
        assert len(runs) == len(PARTITIONS) and all(r["status"] == "SUCCESS" for r in runs), runs

        ledger = workspace.admin.pool_ledger()["pool-a10"]
        assert ledger["peak_asked"] <= 4, ledger  # 6 if every partition had submitted at once
        assert ledger["waits"] == 0, ledger  # nothing waited PENDING for capacity
        text = "\n".join(messages.values())
        # The accelerator pool was sized from the GPU pool and made some step wait.
        assert "accelerator pool gpu-a10 had no limit: 4 slots" in text, text
        assert "waiting for" in text, text
        for run in runs:
            partition = next(t["value"] for t in run["tags"] if t["key"] == "dagster/partition")
            held = f"holding {PARTITIONS[partition]} of the 4 slots of accelerator pool gpu-a10"
            assert held in messages[run["runId"]], messages[run["runId"]]

        with AirClient(workspace.host, workspace.token) as client:
            remote, _ = client.list_runs(active_only=False, limit=25)
            names = sorted(r.run_name or "" for r in remote)
        assert len(names) == len(PARTITIONS), names
        assert all(n.startswith("mixed_sweep--") for n in names), names
        # Each name ends with its partition key, encoded reversibly.
        assert sorted(decode_name_part(n.rsplit("--", 1)[1]) for n in names) == sorted(
            PARTITIONS
        ), names

        # One backfill of six partitions as one run, larger than the pool.
        backfill = deployment.backfill("range_sweep", list(RANGE), timeout=300)
        (run,) = backfill["runs"]
        messages = deployment.run_messages(run["runId"], last=300)
        assert run["status"] == "SUCCESS", messages
        lanes = "ask for more accelerators at once than the 4 slots of accelerator pool gpu-a10"
        assert lanes in messages, messages
        assert "holding 4 of the 4 slots of accelerator pool gpu-a10" in messages, messages
        # Each rank wrote its partition and world size: every partition once, at its size.
        written = sorted(ranks.read_text().splitlines())
        assert written == sorted(f"{k} {n}" for k, n in RANGE.items() for _ in range(n))
        ledger = workspace.admin.pool_ledger()["pool-a10"]
        assert ledger["peak_asked"] <= 4, ledger  # 9 had every partition started at once
        assert ledger["waits"] == 0, ledger
        assert workspace.admin.counters()["runs_created"] == len(PARTITIONS) + 1
    finally:
        deployment.stop()
        workspace.stop()
