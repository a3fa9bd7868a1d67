"""Restarts keep history (subprocess mode); simulate mode holds many runs cheaply."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest

from air_runtime.local import start_local_workspace
from tests.local_workspace.conftest import Workloads


@pytest.mark.slow
def test_restart_mid_run_keeps_history_and_fails_the_interrupted_run(tmp_path) -> None:
    ws = start_local_workspace(data_dir=tmp_path / "ws", in_process=False, token="restart-token")
    try:
        assert ws.pid is not None
        client = httpx.Client(
            base_url=ws.host, headers={"Authorization": "Bearer restart-token"}, timeout=30
        )
        workloads = Workloads(ws, client)
        pid_file = tmp_path / "rank.pid"
        finished = workloads.wait(workloads.submit(workloads.command_task("echo before")))
        live = workloads.submit(
            workloads.command_task(f"echo $$ > {pid_file}; exec sleep 120"), token="keep-me"
        )
        workloads.wait_for(live, "RUNNING")
        while not pid_file.exists():
            time.sleep(0.05)
        rank_pid = int(pid_file.read_text())
        host = ws.host
        ws.kill()  # a crash: the rank is orphaned
        ws.restart()
        assert ws.host == host
        client = httpx.Client(
            base_url=ws.host, headers={"Authorization": "Bearer restart-token"}, timeout=30
        )
        workloads = Workloads(ws, client)
        assert workloads.get(finished["run_id"])["state"]["result_state"] == "SUCCESS"
        assert workloads.logs(finished["run_id"]) == ["before"]
        interrupted = workloads.get(live)
        assert interrupted["state"]["life_cycle_state"] == "INTERNAL_ERROR"
        assert interrupted["state"]["result_state"] == "FAILED"
        assert "stopped" in interrupted["state"]["state_message"]
        deadline = time.monotonic() + 60
        while _alive(rank_pid):
            assert time.monotonic() < deadline, "the orphaned rank was not stopped"
            time.sleep(0.05)
        # the idempotency token still maps to the old run
        task = workloads.command_task("true")
        assert workloads.submit(task, token="keep-me") == live
        ws.restart()  # a clean stop and start
        assert workloads.get(live)["state"]["result_state"] == "FAILED"
    finally:
        ws.stop()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_simulate_mode_timeline_and_per_run_override(tmp_path) -> None:
    ws = start_local_workspace(
        data_dir=tmp_path / "ws",
        mode="simulate",
        # Pending long enough that the first read sees PENDING on a loaded machine too.
        simulate={"pending_s": 5, "running_s": 3600, "result": "SUCCESS"},
    )
    try:
        client = httpx.Client(base_url=ws.host, headers={"Authorization": f"Bearer {ws.token}"})
        workloads = Workloads(ws, client)
        held = workloads.submit(workloads.command_task("this never runs", key="held"))
        assert workloads.get(held)["state"]["life_cycle_state"] == "PENDING"
        workloads.wait_for(held, "RUNNING")
        short = workloads.submit(
            workloads.command_task(
                "x", key="short", env={"AIRO_SIMULATE": "pending_s=0,running_s=0.3,result=FAILED"}
            )
        )
        run = workloads.wait(short)
        assert run["state"]["result_state"] == "FAILED"
        assert "simulated" in workloads.logs(short)[0]
        client.post("/api/2.2/jobs/runs/cancel", json={"run_id": held}).raise_for_status()
        assert workloads.wait(held)["state"]["result_state"] == "CANCELED"
        ws.admin.set_simulation(running_s=0.1, pending_s=0)
        assert (
            workloads.wait(workloads.submit(workloads.command_task("x", key="quick")))["state"][
                "result_state"
            ]
            == "SUCCESS"
        )
    finally:
        ws.stop()


@pytest.mark.slow
def test_thousand_running_runs_and_active_only_listing(tmp_path) -> None:
    ws = start_local_workspace(
        data_dir=tmp_path / "ws",
        mode="simulate",
        simulate={"pending_s": 0, "running_s": 3600, "result": "SUCCESS"},
    )
    try:
        client = httpx.Client(base_url=ws.host, headers={"Authorization": f"Bearer {ws.token}"})
        task = {
            "task_key": "sim",
            "ai_runtime_task": {
                "experiment": "sim",
                "deployments": [
                    {
                        "compute": {"accelerator_type": "GPU_8xH100", "accelerator_count": 64},
                        "command_path": "/Workspace/Users/u/none/command.sh",
                    }
                ],
            },
        }
        ids = set()
        for _ in range(1000):
            body = {"run_name": "sim", "idempotency_token": uuid.uuid4().hex, "tasks": [task]}
            ids.add(client.post("/api/2.2/jobs/runs/submit", json=body).json()["run_id"])
        started = time.monotonic()
        seen, token, pages = set(), None, 0
        while True:
            params = {
                "active_only": "true",
                "limit": 25,
                **({"page_token": token} if token else {}),
            }
            page = client.get("/api/2.2/jobs/runs/list", params=params).json()
            pages += 1
            seen |= {
                r["run_id"]
                for r in page["runs"]
                if r["state"]["life_cycle_state"] in ("PENDING", "RUNNING")
            }
            if not page["has_more"]:
                break
            token = page["next_page_token"]
        print(f"listed 1000 active runs in {pages} pages, {time.monotonic() - started:.2f}s")
        assert seen == ids and pages == 40
    finally:
        ws.stop()
