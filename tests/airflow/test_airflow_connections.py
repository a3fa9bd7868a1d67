"""Connections stored in the metadata database (what ``airflow connections add``, the REST API
and the UI write), not environment variables: every path that reaches the workspace finds them,
including the triggers, which ``dag.test()`` / ``airflow dags test`` run in-process."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from airflow_runs import load_test_dag, task_states, xcom

DEFERRED = "Pausing task as DEFERRED"


AIRFLOW = str(Path(sys.executable).with_name("airflow"))


@pytest.fixture
def stored_connection(local_workspace, airflow_db, monkeypatch) -> Iterator:
    """``databricks_default`` in the metadata database only, added by the very command
    ``airo workspace`` prints for it (run by a shell, as a user pastes it)."""
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session

    from air_runtime.local._server import airflow_connection_command, token_from_file

    monkeypatch.delenv("AIRFLOW_CONN_DATABRICKS_DEFAULT", raising=False)
    command = airflow_connection_command(
        local_workspace.host, token_from_file(local_workspace.data_dir / "token")
    )
    assert local_workspace.token not in command
    added = subprocess.run(
        ["bash", "-c", command.replace("airflow ", f"{AIRFLOW} ", 1)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert added.returncode == 0, added.stderr[-2000:]
    assert local_workspace.token not in added.stdout + added.stderr
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


def test_a_scheme_less_host_of_the_local_workspace_fails_at_once_with_the_fix(
    local_workspace, airflow_db, monkeypatch
):
    import json
    import time

    from airflow_air.hooks import AirHook

    bare = local_workspace.host.removeprefix("http://")
    monkeypatch.setenv(
        "AIRFLOW_CONN_DATABRICKS_DEFAULT",
        json.dumps({"conn_type": "databricks", "host": bare, "password": local_workspace.token}),
    )
    started = time.monotonic()
    ok, message = AirHook().test_connection()
    assert not ok and f"use http://{bare} as the host" in message, message
    assert time.monotonic() - started < 10
