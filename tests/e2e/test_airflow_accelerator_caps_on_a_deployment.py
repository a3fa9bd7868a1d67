"""A sweep of mixed sizes capped in accelerators on a real scheduler (LocalExecutor,
PostgreSQL): 1- and 2-accelerator trials (6 in all) on a GPU pool of 4, the Airflow pool
sized in accelerators by the documented command, one mapped task per size. The workspace's
pool ledger shows the GPU pool saturated (asked for its 4 accelerators at once, never more)
and no attempt waiting for capacity at the platform; the scheduler's log shows a trial held
back by the Airflow pool (not queued for want of slots), and the runs' times show it
submitted only once another trial's run had ended (every trial was ready at the start, and
the deployment runs 4 tasks at once)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from airflow_deployment import E2E_DIR, AirflowDeployment, add_airflow_connections

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


def test_a_mixed_sweep_never_asks_the_gpu_pool_for_more_than_it_reserves(
    tmp_path: Path, postgres: str
) -> None:
    from managed_process import own_database, run_command

    from air_runtime.client import AirClient
    from air_runtime.local import start_local_workspace

    gpu_pool = {"pool_id": "pool-a10", "accelerator_type": "GPU_1xA10", "accelerator_count": 4}
    workspace = start_local_workspace(data_dir=tmp_path / "workspace", gpu_pools=[gpu_pool])
    deployment = AirflowDeployment(
        tmp_path,
        executor="LocalExecutor",
        database_dsn=own_database(postgres, "airo_airflow_caps"),
        dag_folders={"caps": E2E_DIR / "dags_accelerator_caps"},
        parallelism=4,
    )
    try:
        deployment.migrate()
        deployment.start()
        add_airflow_connections(deployment, workspace)
        size = ["gpu_sweep_accelerators", "--gpu-pool", "pool-a10", "--accelerators"]
        run_command(
            "size-pool",
            [sys.executable, "-m", "airflow_air.pools", *size],
            env={**deployment.env},
            log_dir=deployment.log_dir,
            timeout=120,
        )
        pool = deployment.api("GET", "/pools/gpu_sweep_accelerators")
        assert (pool["slots"], pool["include_deferred"]) == (4, True), pool
        deployment.wait_for_dags(["air_mixed_sweep"])
        run = deployment.trigger("air_mixed_sweep")
        states = deployment.wait_for_runs([("air_mixed_sweep", run)], timeout=420)
        assert states[("air_mixed_sweep", run)]["state"] == "success", deployment.diagnose(
            [("air_mixed_sweep", run)]
        )
        for size_task, slots in (("trial_1_accelerators", 1), ("trial_2_accelerators", 2)):
            body = deployment.api(
                "GET", f"/dags/air_mixed_sweep/dagRuns/{run}/taskInstances/{size_task}/listMapped"
            )
            tis = body["task_instances"]
            assert len(tis) == 2 and all(t["state"] == "success" for t in tis), tis
            assert {(t["pool"], t["pool_slots"]) for t in tis} == {
                ("gpu_sweep_accelerators", slots)
            }, tis
        # Held by the Airflow pool, in the scheduler's own words: a ready trial not queued
        # for want of the pool's slots (the pool full, or fewer open than the trial holds).
        scheduler_log = (deployment.log_dir / "scheduler.log").read_text()
        assert re.search(
            r"Not scheduling since there are 0 open slots in pool gpu_sweep_accelerators"
            r"|Not executing <TaskInstance: air_mixed_sweep\.trial_[12]_accelerators [^>]*> "
            r"since it requires [12] slots but there are [01] open slots in the pool "
            r"gpu_sweep_accelerators",
            scheduler_log,
        ), scheduler_log[-4000:]
        ledger = workspace.admin.pool_ledger()["pool-a10"]
        # Saturated: 4 at once (6 if every trial had started at once, 3 or fewer if the
        # pool had run them one size at a time).
        assert ledger["peak_asked"] == 4, ledger
        assert ledger["waits"] == 0, ledger  # nothing waited PENDING for capacity
        with AirClient(workspace.host, workspace.token) as client:
            runs, _ = client.list_runs(active_only=False, limit=25)
        spans = sorted((r.start_time or 0, r.end_time or 0) for r in runs)
        assert len(spans) == 4 and all(start and end for start, end in spans), spans
        first_end = min(end for _, end in spans)
        # A trial waited for the Airflow pool (not for the platform: no waits above).
        assert any(start >= first_end for start, _ in spans), spans
    finally:
        deployment.stop()
        workspace.stop()
