"""A triggerer SIGKILLed and started again while a deferred task shows its run's lines live: the
trigger taken over by the new triggerer starts after the lines already in the task log, so the
task's log (read through Airflow's log API, as the UI reads it) holds every line once.

Real deployment (LocalExecutor on PostgreSQL; scheduler, triggerer, DAG processor and API server
as separate processes). The run prints its first lines and holds; the kill comes once the
trigger has kept what it showed (its ``air_lines_shown`` XCom names the newest line the log
holds), the release once the new triggerer holds the trigger. The Dag:
dags_resume_lines/air_resume_lines.py."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from airflow_deployment import E2E_DIR, AirflowDeployment, add_airflow_connections
from managed_process import own_database

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

DAG_ID, TASK_ID, LINES = "air_resume_lines", "held", 20
TASK_KEY = "resume_lines"  # the run's task: the workload's experiment


def _until(what: str, probe, deployment: AirflowDeployment, timeout: float = 180) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := probe()):
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout:.0f} s\n{deployment.logs()}")
        time.sleep(0.3)
    return found


def _try_log(deployment: AirflowDeployment, run_id: str) -> str:
    body: dict[str, Any] = deployment.api(
        "GET",
        f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{TASK_ID}/logs/1",
        params={"full_content": "true"},
    )
    return "\n".join(
        str(e.get("event", "")) if isinstance(e, dict) else str(e) for e in body["content"]
    )


def _node_lines(log: str) -> list[str]:
    mark = f"[{TASK_KEY} node 0 attempt 0] "
    return [line.split(mark, 1)[1] for line in log.splitlines() if mark in line]


def test_a_triggerer_killed_mid_run_shows_no_line_twice(
    tmp_path: Path, postgres: str, local_workspace, workspace_client
) -> None:
    deployment = AirflowDeployment(
        tmp_path,
        executor="LocalExecutor",
        database_dsn=own_database(postgres, "airo_airflow_resume_lines"),
        dag_folders={"e2e": E2E_DIR / "dags_resume_lines"},
        extra_env={
            "AIRFLOW__AIR__LIVE_LINES_INTERVAL": "1",
            # The new triggerer takes the dead one's triggers 10 s after its last heartbeat.
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
            "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "10",
        },
    )
    release = tmp_path / "release"
    try:
        deployment.migrate()
        deployment.start()
        add_airflow_connections(deployment, local_workspace)
        deployment.wait_for_dags([DAG_ID])
        run_id = deployment.trigger(DAG_ID, {"release": str(release)})

        def deferred_trigger() -> dict | None:
            ti = deployment.task_instance(DAG_ID, run_id, TASK_ID)
            trigger = ti.get("trigger") or {}
            held = ti["state"] == "deferred" and trigger.get("triggerer_id") is not None
            return trigger if held else None

        first = _until("the task deferred to a triggerer", deferred_trigger, deployment)
        remote = int(deployment.xcom(DAG_ID, run_id, TASK_ID, "run_id"))

        # The run holds after its first lines; the trigger has shown them all and kept so.
        def kept_the_newest() -> bool:
            records = list(workspace_client.read_logs(remote))
            if not any(r.body == f"before {LINES}" for r in records):
                return False
            if "air_lines_shown" not in deployment.xcom_keys(DAG_ID, run_id, TASK_ID):
                return False
            kept = deployment.xcom(DAG_ID, run_id, TASK_ID, "air_lines_shown")
            newest = max(r.time_unix_nano for r in records)
            return kept["run_id"] == remote and kept["streams"].get(f"{TASK_KEY}/0/0") == newest

        _until("the trigger kept the newest line it showed", kept_the_newest, deployment)
        deployment.kill_service("triggerer", hard=True)
        deployment.start_service("triggerer")

        def taken_over() -> bool:
            trigger = deferred_trigger()
            return trigger is not None and trigger["triggerer_id"] != first["triggerer_id"]

        _until("the new triggerer took the trigger over", taken_over, deployment)
        release.touch()
        states = deployment.wait_for_runs([(DAG_ID, run_id)], timeout=240)
        assert states[(DAG_ID, run_id)]["state"] == "success", deployment.diagnose(
            [(DAG_ID, run_id)]
        )

        expected = [f"before {i}" for i in range(1, LINES + 1)]
        expected += [f"after {i}" for i in range(1, LINES + 1)]

        def log_to_the_end() -> str:
            text = _try_log(deployment, run_id)
            return text if f"after {LINES}" in text else ""

        log = _until("the task log holds the last line", log_to_the_end, deployment, 60)
        shown = _node_lines(log)
        assert sorted(shown) == sorted(expected), log[-5000:]  # every line, none twice
        assert "air_lines_shown" not in deployment.xcom_keys(DAG_ID, run_id, TASK_ID)
    finally:
        deployment.stop()
