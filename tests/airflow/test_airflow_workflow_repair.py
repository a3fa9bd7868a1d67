"""Clearing a failed stage of an AirWorkflowTaskGroup re-runs that stage and its cleared
downstream stages, and nothing that succeeded: a repair of the same run, or, where the
workspace refuses to repair it, a new run of only those stages.

prep >> train >> evaluate; train runs out of GPU memory on its first execution. Executions
are counted by the ranks themselves (each appends a line to a file of its stage), not by
what the API says."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow_runs import load_test_dag, scope_keys, task_states, xcom
from conftest import connection_json

from air_runtime import AirClient
from air_runtime.local import start_local_workspace

DAG_FILE = "air_test_repair_dags.py"
STAGES = ("prep", "train", "evaluate")


def executions(folder: Path, stages: tuple[str, ...] = STAGES) -> dict[str, int]:
    return {
        stage: len((folder / stage).read_text().splitlines()) if (folder / stage).exists() else 0
        for stage in stages
    }


def clear_with_downstream(dag_id: str, run_id: str, task_id: str) -> None:
    """What "Clear" with "Downstream" does in the UI (the REST API's clearTaskInstances):
    the task and its downstream tasks, through Airflow's own clear."""
    from airflow.models.dagbag import DBDagBag
    from airflow.models.taskinstance import clear_task_instances
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState

    with create_session() as session:
        dag = DBDagBag().get_latest_version_of_dag(dag_id, session=session)
        assert dag is not None
        subset = dag.partial_subset(
            task_ids=[task_id], include_downstream=True, include_upstream=False
        )
        tis = dag.clear(
            dry_run=True, task_ids=list(subset.task_dict), run_id=run_id, session=session
        )
        clear_task_instances(list(tis), session, DagRunState.QUEUED)


def run_dag_run(dag: Any, run_id: str) -> str:
    """Run what the scheduler would run of the Dag run until it ends (the loop of
    ``dag.test()``, on an existing run); its final state."""
    from airflow.models.dagbag import DBDagBag
    from airflow.models.dagrun import DagRun
    from airflow.sdk.definitions.dag import _run_task
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState, TaskInstanceState
    from sqlalchemy import select

    with create_session() as session:
        dag_run = session.scalars(
            select(DagRun).where(DagRun.dag_id == dag.dag_id, DagRun.run_id == run_id)
        ).one()
        dag_run.dag = DBDagBag().get_dag_for_run(dag_run, session=session)
        dag_run.state = DagRunState.RUNNING
        session.commit()
        while dag_run.state == DagRunState.RUNNING:
            session.expire_all()
            schedulable, _ = dag_run.update_state(session=session)
            for ti in schedulable:
                ti.try_number += 1
                ti.state = TaskInstanceState.SCHEDULED
            session.commit()
            scheduled = [
                ti
                for ti in dag_run.get_task_instances(session=session)
                if ti.state == TaskInstanceState.SCHEDULED
            ]
            for ti in scheduled:
                with contextlib.suppress(Exception):  # a failed task is a state, read below
                    _run_task(ti=ti, task=dag.task_dict[ti.task_id], run_triggerer=True)
        return str(getattr(dag_run.state, "value", dag_run.state))


def fail_train_once(folder: Path) -> tuple[Any, Any]:
    dag = load_test_dag("air_test_workflow_repair", DAG_FILE)
    dag_run = dag.test(run_conf={"dir": str(folder)})
    assert task_states(dag_run) == {
        "pipeline.submit": "success",
        "pipeline.prep": "success",
        "pipeline.train": "failed",
        "pipeline.evaluate": "upstream_failed",
    }
    assert executions(folder) == {"prep": 1, "train": 1, "evaluate": 0}
    return dag, dag_run


def stage_run_ids(dag: Any, dag_run: Any) -> dict[str, int]:
    return {
        stage: xcom(dag.dag_id, dag_run.run_id, f"pipeline.{stage}", "run_id") for stage in STAGES
    }


def test_clearing_the_failed_stage_repairs_the_run(workspace, task_log, tmp_path):
    dag, dag_run = fail_train_once(tmp_path)
    run_id = xcom(dag.dag_id, dag_run.run_id, "pipeline.submit", "run_id")

    clear_with_downstream(dag.dag_id, dag_run.run_id, "pipeline.train")
    assert run_dag_run(dag, dag_run.run_id) == "success"

    assert executions(tmp_path) == {"prep": 1, "train": 2, "evaluate": 1}
    assert set(stage_run_ids(dag, dag_run).values()) == {run_id}  # the same run, repaired
    assert workspace.admin.counters()["runs_created"] == 1
    assert f"repairing run {run_id}: re-running train, evaluate; prep succeeded and is kept" in (
        task_log.text()
    )
    with AirClient(workspace.host, workspace.token) as client:
        state = client.get_run(run_id, include_history=True)
    assert state.is_success
    # One repair: evaluate, re-run by train's, waited on its new task run.
    assert [r.repair_id is not None for r in state.repairs] == [False, True]
    repaired = set(state.repairs[1].task_run_ids)
    assert {state.task("train").run_id, state.task("evaluate").run_id} == repaired
    # Train's GPU-hours count the task run that failed and the repair's.
    train_hours = xcom(dag.dag_id, dag_run.run_id, "pipeline.train", "gpu_hours")
    assert train_hours == round(state.gpu_hours("train"), 6)
    assert train_hours > round(state.task("train").gpu_hours(), 6) > 0
    result = xcom(dag.dag_id, dag_run.run_id, "pipeline.evaluate")
    assert result["result_state"] == "SUCCESS"


@pytest.fixture
def refusing_workspace(airflow_db, monkeypatch, tmp_path) -> Iterator[Any]:
    """A local workspace that refuses to repair any run, as ``databricks_default``."""
    workspace = start_local_workspace(
        data_dir=tmp_path / "refusing", image_delay_s=0.2, retry_interval_s=0.05, refuse_repair=True
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_DATABRICKS_DEFAULT", connection_json(workspace.host, workspace.token)
    )
    try:
        yield workspace
    finally:
        workspace.stop()


def test_where_repair_is_refused_a_new_run_of_only_the_cleared_stages(
    refusing_workspace, task_log, tmp_path
):
    dag, dag_run = fail_train_once(tmp_path)
    first_run = xcom(dag.dag_id, dag_run.run_id, "pipeline.submit", "run_id")

    clear_with_downstream(dag.dag_id, dag_run.run_id, "pipeline.train")
    assert run_dag_run(dag, dag_run.run_id) == "success"

    assert executions(tmp_path) == {"prep": 1, "train": 2, "evaluate": 1}
    runs = stage_run_ids(dag, dag_run)
    assert runs["prep"] == first_run
    assert runs["train"] == runs["evaluate"] != first_run
    assert refusing_workspace.admin.counters()["runs_created"] == 2
    text = task_log.text()
    assert f"Run {first_run} cannot be repaired" in text
    assert "submitting a new run of train, evaluate; prep succeeded and is kept" in text
    with AirClient(refusing_workspace.host, refusing_workspace.token) as client:
        second = client.get_run(runs["train"])
    assert second.is_success
    assert [t.task_key for t in second.tasks] == ["train", "evaluate"]


def test_clearing_the_submit_task_starts_a_fresh_run(workspace, tmp_path):
    dag, dag_run = fail_train_once(tmp_path)
    first_run = xcom(dag.dag_id, dag_run.run_id, "pipeline.submit", "run_id")

    clear_with_downstream(dag.dag_id, dag_run.run_id, "pipeline.submit")
    assert run_dag_run(dag, dag_run.run_id) == "success"

    # The user asked for everything again: prep is paid twice.
    assert executions(tmp_path) == {"prep": 2, "train": 2, "evaluate": 1}
    runs = stage_run_ids(dag, dag_run)
    assert len(set(runs.values())) == 1 and runs["prep"] != first_run
    assert workspace.admin.counters()["runs_created"] == 2


def test_an_automatic_retry_of_the_failed_stage_repairs_the_run(workspace, task_log, tmp_path):
    dag = load_test_dag("air_test_workflow_repair_retry", DAG_FILE)
    dag_run = dag.test(run_conf={"dir": str(tmp_path)})

    assert set(task_states(dag_run).values()) == {"success"}
    assert executions(tmp_path) == {"prep": 1, "train": 2, "evaluate": 1}
    run_id = xcom(dag.dag_id, dag_run.run_id, "pipeline.submit", "run_id")
    assert set(stage_run_ids(dag, dag_run).values()) == {run_id}
    assert f"repairing run {run_id}: re-running train, evaluate" in task_log.text()
    assert workspace.admin.counters()["runs_created"] == 1


def test_stages_cleared_together_make_one_repair(workspace, task_log, tmp_path):
    stages = ("prep", "train_a", "train_b", "evaluate")
    dag = load_test_dag("air_test_workflow_repair_parallel", DAG_FILE)
    dag_run = dag.test(run_conf={"dir": str(tmp_path)})
    assert executions(tmp_path, stages) == {"prep": 1, "train_a": 1, "train_b": 1, "evaluate": 0}
    run_id = xcom(dag.dag_id, dag_run.run_id, "pipeline.submit", "run_id")

    for task_id in ("pipeline.train_a", "pipeline.train_b"):
        clear_with_downstream(dag.dag_id, dag_run.run_id, task_id)
    assert run_dag_run(dag, dag_run.run_id) == "success"

    assert executions(tmp_path, stages) == {"prep": 1, "train_a": 2, "train_b": 2, "evaluate": 1}
    with AirClient(workspace.host, workspace.token) as client:
        state = client.get_run(run_id, include_history=True)
    assert state.is_success
    assert [r.repair_id is not None for r in state.repairs] == [False, True]
    assert task_log.text().count(f"repairing run {run_id}: re-running") == 1
    assert "re-running train_a, train_b, evaluate; prep succeeded and is kept" in task_log.text()
    assert workspace.admin.counters()["runs_created"] == 1


def test_a_repaired_stage_reads_its_secrets_again(workspace, monkeypatch, tmp_path):
    monkeypatch.setenv("AIRFLOW_VAR_AIR_TEST_API_KEY", "repair-secret-value")
    dag = load_test_dag("air_test_workflow_repair_secret", DAG_FILE)
    dag_run = dag.test(run_conf={"dir": str(tmp_path)})
    assert executions(tmp_path) == {"prep": 1, "train": 1, "evaluate": 0}
    assert scope_keys(workspace, "air-tests-repair") == []  # deleted once the run ended

    clear_with_downstream(dag.dag_id, dag_run.run_id, "pipeline.train")
    assert run_dag_run(dag, dag_run.run_id) == "success"

    assert executions(tmp_path) == {"prep": 1, "train": 2, "evaluate": 1}
    assert scope_keys(workspace, "air-tests-repair") == []  # and again after the repair


def test_a_new_run_of_the_cleared_stages_gets_their_secrets_and_deletes_them(
    refusing_workspace, monkeypatch, tmp_path
):
    monkeypatch.setenv("AIRFLOW_VAR_AIR_TEST_API_KEY", "repair-secret-value")
    dag = load_test_dag("air_test_workflow_repair_secret", DAG_FILE)
    dag_run = dag.test(run_conf={"dir": str(tmp_path)})
    clear_with_downstream(dag.dag_id, dag_run.run_id, "pipeline.train")
    assert run_dag_run(dag, dag_run.run_id) == "success"

    assert executions(tmp_path) == {"prep": 1, "train": 2, "evaluate": 1}
    assert refusing_workspace.admin.counters()["runs_created"] == 2
    assert scope_keys(refusing_workspace, "air-tests-repair") == []
