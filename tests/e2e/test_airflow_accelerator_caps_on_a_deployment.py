"""A sweep of mixed sizes capped in accelerators on a real scheduler (LocalExecutor,
PostgreSQL): 1- and 2-accelerator trials (6 in all) on a GPU pool of 4, the Airflow pool
sized in accelerators by the documented command, one mapped task per size. The workspace's
pool ledger shows the GPU pool was never asked for more than 4 accelerators at once and no
attempt waited for capacity at the platform."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from airflow_deployment import E2E_DIR, AirflowDeployment, add_airflow_connections

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


def test_a_mixed_sweep_never_asks_the_gpu_pool_for_more_than_it_reserves(
    tmp_path: Path, postgres: str
) -> None:
    from managed_process import own_database, run_command

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
        ledger = workspace.admin.pool_ledger()["pool-a10"]
        assert ledger["peak_asked"] <= 4, ledger  # 6 if every trial had started at once
        assert ledger["waits"] == 0, ledger  # nothing waited PENDING for capacity
    finally:
        deployment.stop()
        workspace.stop()
