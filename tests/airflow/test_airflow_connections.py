"""Connections stored in the metadata database (what ``airflow connections add``, the REST API
and the UI write), not environment variables: every path that reaches the workspace finds them,
including the triggers, which ``dag.test()`` / ``airflow dags test`` run in-process."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from airflow_runs import load_test_dag, task_states, xcom

DEFERRED = "Pausing task as DEFERRED"


@pytest.fixture
def stored_connection(local_workspace, airflow_db, monkeypatch) -> Iterator:
    """``databricks_default`` in the metadata database only."""
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session

    monkeypatch.delenv("AIRFLOW_CONN_DATABRICKS_DEFAULT", raising=False)
    with create_session() as session:
        session.add(
            Connection(
                conn_id="databricks_default",
                conn_type="databricks",
                host=local_workspace.host,
                password=local_workspace.token,
            )
        )
    try:
        yield local_workspace
    finally:
        with create_session() as session:
            session.query(Connection).filter(Connection.conn_id == "databricks_default").delete()


def test_a_stored_connection_serves_every_path(stored_connection, task_log):
    dag = load_test_dag("air_test_every_path")
    dag_run = dag.test()
    log = task_log.text()
    assert task_states(dag_run) == dict.fromkeys(
        [
            "image",
            "sync",
            "deferred",
            "pipeline.submit",
            "pipeline.stage_sync",
            "pipeline.stage_deferred",
        ],
        "success",
    ), log
    assert "is not defined" not in log
    # The image, the single run and the second stage each waited in a trigger.
    deferred = [e for e in task_log.events if e.get("event", "").startswith(DEFERRED)]
    assert {e.get("task_id") for e in deferred} == {
        "image",
        "deferred",
        "pipeline.stage_deferred",
    }, log
    stage = xcom(dag.dag_id, dag_run.run_id, "pipeline.stage_deferred")
    assert stage["task_key"] == "stage_deferred" and stage["result_state"] == "SUCCESS"
    assert stored_connection.admin.counters()["runs_created"] == 3
