"""Clearing a failed workflow stage on a real deployment (LocalExecutor on PostgreSQL,
scheduler, triggerer, DAG processor and API server as separate processes), through the REST
API call the UI's "Clear" with "Downstream" makes: the run is repaired (or, on a workspace
that refuses repair, only the cleared stages run again in a new run), and the ranks' own
record of their executions says prep ran once, train twice, evaluate once."""

from __future__ import annotations

from pathlib import Path

import pytest
from airflow_deployment import E2E_DIR, AirflowDeployment, add_airflow_connections, task_log_text
from managed_process import own_database

from air_runtime.client import AirClient
from air_runtime.local import start_local_workspace

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(480)]

STAGES = ("prep", "train", "evaluate")
PARALLEL = ("prep", "train_a", "train_b", "evaluate")
DAGS = ("air_repair", "air_repair_refused", "air_repair_parallel")


def executions(folder: Path, stages: tuple[str, ...] = STAGES) -> dict[str, int]:
    return {
        stage: len((folder / stage).read_text().splitlines()) if (folder / stage).exists() else 0
        for stage in stages
    }


def clear_with_downstream(
    deployment: AirflowDeployment, dag_id: str, run_id: str, task_ids: list[str]
) -> None:
    """What the UI's "Clear" on failed stages with "Downstream" sends."""
    deployment.api(
        "POST",
        f"/dags/{dag_id}/clearTaskInstances",
        json={
            "dry_run": False,
            "dag_run_id": run_id,
            "task_ids": task_ids,
            "include_downstream": True,
            "include_upstream": False,
            "only_failed": False,
            "reset_dag_runs": True,
        },
    )


def test_clearing_a_failed_stage_repairs_or_reruns_only_it(
    tmp_path: Path, postgres: str, local_workspace, workspace_client
) -> None:
    refusing = start_local_workspace(data_dir=tmp_path / "refusing", refuse_repair=True)
    deployment = AirflowDeployment(
        tmp_path,
        executor="LocalExecutor",
        database_dsn=own_database(postgres, "airo_airflow_repair"),
        dag_folders={"e2e": E2E_DIR / "dags"},
    )
    try:
        deployment.migrate()
        deployment.start()
        add_airflow_connections(deployment, local_workspace)
        deployment.api(
            "POST",
            "/connections",
            json={
                "connection_id": "air_refusing",
                "conn_type": "databricks",
                "host": refusing.host,
                "password": refusing.token,
            },
        )
        deployment.wait_for_dags(list(DAGS))
        folders = {dag_id: tmp_path / dag_id for dag_id in DAGS}
        runs = {}
        for dag_id, folder in folders.items():
            folder.mkdir()
            runs[dag_id] = deployment.trigger(dag_id, {"dir": str(folder)})
        states = deployment.wait_for_runs(list(runs.items()), timeout=240)
        assert {k: v["state"] for k, v in states.items()} == {
            run: "failed" for run in runs.items()
        }, deployment.diagnose(list(runs.items()))
        for dag_id, folder in folders.items():
            if dag_id == "air_repair_parallel":
                assert executions(folder, PARALLEL) == {
                    "prep": 1,
                    "train_a": 1,
                    "train_b": 1,
                    "evaluate": 0,
                }
            else:
                assert executions(folder) == {"prep": 1, "train": 1, "evaluate": 0}

        first_runs = {
            dag_id: deployment.xcom(dag_id, run_id, "pipeline.submit", "run_id")
            for dag_id, run_id in runs.items()
        }
        # Repairs answered late: the two parallel stages cleared together both read the run
        # before either repair is made, and still make one.
        local_workspace.admin.set_faults({"jobs/runs/repair": {"latency_ms": 3000}})
        for dag_id, run_id in runs.items():
            stages = ["train_a", "train_b"] if dag_id == "air_repair_parallel" else ["train"]
            clear_with_downstream(deployment, dag_id, run_id, [f"pipeline.{s}" for s in stages])
        states = deployment.wait_for_runs(list(runs.items()), timeout=240)
        assert {k: v["state"] for k, v in states.items()} == {
            run: "success" for run in runs.items()
        }, deployment.diagnose(list(runs.items()))
        for dag_id, folder in folders.items():
            if dag_id == "air_repair_parallel":
                assert executions(folder, PARALLEL) == {
                    "prep": 1,
                    "train_a": 2,
                    "train_b": 2,
                    "evaluate": 1,
                }
            else:
                assert executions(folder) == {"prep": 1, "train": 2, "evaluate": 1}

        # Repaired: one run, with one repair of train and evaluate.
        dag_id, run_id = "air_repair", runs["air_repair"]
        stage_runs = {s: deployment.xcom(dag_id, run_id, f"pipeline.{s}", "run_id") for s in STAGES}
        assert set(stage_runs.values()) == {first_runs[dag_id]}
        state = workspace_client.get_run(first_runs[dag_id], include_history=True)
        assert state.is_success
        assert [r.repair_id is not None for r in state.repairs] == [False, True]
        log = task_log_text(deployment, dag_id, run_id, "pipeline.train")
        assert (
            f"repairing run {first_runs[dag_id]}: re-running train, evaluate; "
            "prep succeeded and is kept"
        ) in log, log[-3000:]

        # Refused: train and evaluate in a new run of their own; prep kept in the first.
        dag_id, run_id = "air_repair_refused", runs["air_repair_refused"]
        stage_runs = {s: deployment.xcom(dag_id, run_id, f"pipeline.{s}", "run_id") for s in STAGES}
        assert stage_runs["prep"] == first_runs[dag_id]
        assert stage_runs["train"] == stage_runs["evaluate"] != first_runs[dag_id]
        with AirClient(refusing.host, refusing.token) as client:
            second = client.get_run(stage_runs["train"])
        assert second.is_success and [t.task_key for t in second.tasks] == ["train", "evaluate"]
        assert refusing.admin.counters()["runs_created"] == 2

        # Cleared together: one repair of both stages (and evaluate).
        dag_id, run_id = "air_repair_parallel", runs["air_repair_parallel"]
        state = workspace_client.get_run(first_runs[dag_id], include_history=True)
        assert state.is_success
        assert [r.repair_id is not None for r in state.repairs] == [False, True]
        logs = "\n".join(
            task_log_text(deployment, dag_id, run_id, f"pipeline.{s}")
            for s in ("train_a", "train_b")
        )
        assert logs.count(f"repairing run {first_runs[dag_id]}: re-running") == 1, logs[-4000:]
    finally:
        deployment.stop()
        refusing.stop()
