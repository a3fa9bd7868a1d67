"""The "MLflow run" link of a task is there while its run is still RUNNING, as Airflow's REST
API serves it to the UI, on a real deployment (scheduler, triggerer, dag-processor,
api-server; LocalExecutor, PostgreSQL): for a deferred task, written by its trigger while the
task instance stays deferred (no worker run for it), and for a task waiting in its worker.
Once the runs end, the links are the same."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from airflow_deployment import E2E_DIR, AirflowDeployment, add_airflow_connections
from managed_process import own_database

from air_runtime import AirClient, mlflow_ids, mlflow_run_url
from air_runtime.local import start_local_workspace

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

DAG_ID = "air_mlflow_link"
WAITING = {"deferred": "deferred", "in_worker": "running"}  # task -> its state while held


def _expected_url(client: AirClient, run_id: int) -> str:
    """The MLflow run of the run's task, as `databricks air get` finds it (runs/get-output)."""
    (task,) = client.get_run(run_id).tasks
    assert task.run_id is not None
    url = mlflow_run_url(client.host, *mlflow_ids(client.get_output(task.run_id)))
    assert url, task
    return url


def test_the_mlflow_link_shows_while_the_run_runs(tmp_path: Path, postgres: str) -> None:
    workspace = start_local_workspace(data_dir=tmp_path / "workspace")
    deployment = AirflowDeployment(
        tmp_path,
        executor="LocalExecutor",
        database_dsn=own_database(postgres, "airo_airflow_mlflow_link"),
        dag_folders={"mlflow_link": E2E_DIR / "dags_mlflow_link"},
        parallelism=4,
    )
    release = tmp_path / "release"
    try:
        deployment.migrate()
        deployment.start()
        add_airflow_connections(deployment, workspace)
        deployment.wait_for_dags([DAG_ID])
        run = deployment.trigger(DAG_ID, {"release": str(release)})

        seen: dict[str, str] = {}
        deadline = time.monotonic() + 300
        with AirClient(workspace.host, workspace.token) as client:
            while len(seen) < len(WAITING):
                for task_id, waiting in WAITING.items():
                    if task_id in seen:
                        continue
                    link = deployment.extra_links(DAG_ID, run, task_id).get("MLflow run")
                    if not link:
                        continue
                    # Read while the task still waits and its run still runs: the run is
                    # held until the test releases it, so it cannot have ended.
                    ti = deployment.task_instance(DAG_ID, run, task_id)
                    assert ti["state"] == waiting, (task_id, ti["state"])
                    run_id = int(deployment.xcom(DAG_ID, run, task_id, "run_id"))
                    assert client.get_run(run_id).life_cycle_state == "RUNNING"
                    assert link == _expected_url(client, run_id), (task_id, link)
                    seen[task_id] = link
                if time.monotonic() > deadline:
                    pytest.fail(
                        f"MLflow links seen: {seen}\n{deployment.diagnose([(DAG_ID, run)])}"
                    )
                time.sleep(1)

        release.touch()
        states = deployment.wait_for_runs([(DAG_ID, run)], timeout=300)
        assert states[(DAG_ID, run)]["state"] == "success", deployment.diagnose([(DAG_ID, run)])
        for task_id, link in seen.items():
            assert deployment.extra_links(DAG_ID, run, task_id)["MLflow run"] == link
            assert deployment.xcom(DAG_ID, run, task_id, "mlflow_run_url") == link
            assert deployment.xcom(DAG_ID, run, task_id, "return_value")["run_id"] == int(
                deployment.xcom(DAG_ID, run, task_id, "run_id")
            )
    finally:
        release.touch()
        deployment.stop()
        workspace.stop()
