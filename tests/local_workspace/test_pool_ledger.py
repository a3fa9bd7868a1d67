"""The GPU pool ledger's record for tests: the most accelerators asked for at once (held
plus waited for) and how many attempts waited for capacity."""

from __future__ import annotations

from pathlib import Path

import httpx

from air_runtime.local import start_local_workspace
from tests.local_workspace.conftest import Workloads


def test_the_ledger_records_the_peak_asked_and_the_waits(tmp_path: Path) -> None:
    pool = {"pool_id": "pool-two", "accelerator_type": "GPU_1xA10", "accelerator_count": 2}
    wait_for = 'while [ ! -e "{}" ]; do sleep 0.05; done'
    with (
        start_local_workspace(data_dir=tmp_path / "ws", gpu_pools=[pool]) as ws,
        httpx.Client(
            base_url=ws.host, headers={"Authorization": f"Bearer {ws.token}"}, timeout=30
        ) as api,
    ):
        workloads = Workloads(ws, api)

        def pooled(command: str, key: str, count: int) -> dict:
            task = workloads.command_task(command, key=key)
            compute = task["ai_runtime_task"]["deployments"][0]["compute"]
            compute["provisioned_capacity_id"] = "pool-two"
            compute["accelerator_count"] = count
            return task

        assert ws.admin.pool_ledger()["pool-two"] == {
            "reserved": 2,
            "used": 0,
            "peak_asked": 0,
            "waits": 0,
        }
        first = workloads.submit(pooled(wait_for.format(tmp_path / "go"), "first", 1))
        workloads.wait_for(first, "RUNNING")
        assert ws.admin.pool_ledger()["pool-two"]["peak_asked"] == 1
        second = workloads.submit(pooled(wait_for.format(tmp_path / "go"), "second", 2))
        state = workloads.get(second)["state"]
        assert "capacity" in state["state_message"].lower(), state  # it waits
        ledger = ws.admin.pool_ledger()["pool-two"]
        assert (ledger["used"], ledger["peak_asked"], ledger["waits"]) == (1, 3, 1), ledger
        (tmp_path / "go").touch()
        workloads.wait(first)
        workloads.wait(second)
        ledger = ws.admin.pool_ledger()["pool-two"]
        assert (ledger["used"], ledger["peak_asked"], ledger["waits"]) == (0, 3, 1), ledger
