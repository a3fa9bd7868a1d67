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


def test_a_stored_connection_serves_every_path(stored_connection, task_log, tmp_path):
    dag = load_test_dag("air_test_every_path")
    dag_run = dag.test(run_conf={"marker": str(tmp_path / "stage-task-started")})
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
    # A stage's success is the stage's, not its run's (which may still be going).
    workflow_run = stage["run_id"]
    assert f"Stage stage_sync of run {workflow_run} succeeded (" in log
    assert f"Run {workflow_run} succeeded" not in log
    # Every node's lines in the task log, labelled with task, node and attempt: streamed by
    # the runs waited on in the worker, copied when the deferred ones completed.
    for name, nodes in (("sync", 2), ("deferred", 2), ("stage_sync", 1), ("stage_deferred", 2)):
        for rank in range(nodes):
            line = f"node {rank} attempt 0] line-of-{name}-{rank}"
            assert line in log, (line, log[-3000:])
    assert "stage_deferred node 1 attempt 0] line-of-stage_deferred-1" in log
    # A stage's log has its own task's lines only.
    stage_lines = [
        e["event"] for e in task_log.events if "line-of-stage_sync" in str(e.get("event"))
    ]
    assert len(stage_lines) == 1, stage_lines
    # GPU-hours: accelerators x duration of each attempt, in the result and its own XCom.
    for task_id, accelerators in (("sync", 2), ("deferred", 2), ("pipeline.stage_deferred", 2)):
        result = xcom(dag.dag_id, dag_run.run_id, task_id)
        hours = result["gpu_hours"]
        assert 0 < hours < accelerators * 60 / 3600, (task_id, result)
        assert xcom(dag.dag_id, dag_run.run_id, task_id, "gpu_hours") == hours
    # stage_deferred's ranks run 2 s or more on 2 accelerators.
    assert stage["gpu_hours"] >= 2 * 2 / 3600
    # The image's digest in Docker's form.
    digest = xcom(dag.dag_id, dag_run.run_id, "image")
    assert digest.startswith("sha256:") and len(digest) == len("sha256:") + 64, digest


def test_a_scheme_less_host_of_the_local_workspace_fails_at_once_with_the_fix(
    local_workspace, airflow_db, monkeypatch, task_log
):
    """``127.0.0.1:PORT`` means https://; the local workspace answers plain HTTP. The task
    fails at once (no TLS retries) saying which host to use, and a task that failed before it
    submitted logs no missing-XCom errors for its run links."""
    import json
    import time

    from airflow_air.hooks import AirHook

    bare = local_workspace.host.removeprefix("http://")
    fix = f"use http://{bare} as the host"
    monkeypatch.setenv(
        "AIRFLOW_CONN_DATABRICKS_DEFAULT",
        json.dumps({"conn_type": "databricks", "host": bare, "password": local_workspace.token}),
    )
    ok, message = AirHook().test_connection()
    assert not ok and fix in message, message

    dag = load_test_dag("air_test_sync")
    started = time.monotonic()
    dag_run = dag.test()
    assert time.monotonic() - started < 60  # minutes of TLS retries before
    assert task_states(dag_run) == {"run": "failed"}
    log = task_log.text()
    assert fix in log and "AirConfigurationError" in log
    assert "XCom not found" not in log
    assert local_workspace.admin.counters()["runs_created"] == 0


def test_copied_logs_are_labelled_and_capped(local_workspace):
    """What a resumed deferred task writes: every node's lines, labelled, at most N lines."""
    from airflow_air._logs import LogCopy

    from air_runtime import AirClient, RunOutcome, RunStatus, end_of_try_flow, load_workload

    class Lines:
        def __init__(self) -> None:
            self.lines: list[str] = []

        def info(self, event: str, *args: object) -> None:
            self.lines.append(event % args)

        warning = info

    workload = load_workload(
        {
            "experiment_name": "copied",
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 2},
            "command": "echo one-$POD_RANK; echo two-$POD_RANK",
        }
    )
    with AirClient(local_workspace.host, local_workspace.token) as client:
        run_id = client.submit_workload(workload).run_id
        assert client.wait(run_id, timeout=60, poll_interval=0.1).is_success
        every, capped = Lines(), Lines()
        ended = RunOutcome(RunStatus.SUCCESS, run_id, "")
        for log, cap in ((every, 1000), (capped, 3)):
            copy = LogCopy(log, run_id, None, cap)
            client.run_flow(lambda core, c=copy: end_of_try_flow(core, ended, lines=c.add))
    for rank in (0, 1):
        for word in ("one", "two"):
            assert any(
                line.endswith(f"node {rank} attempt 0] {word}-{rank}") for line in every.lines
            ), every.lines
    assert len(capped.lines) <= 4 and "completed_log_lines" in capped.lines[-1], capped.lines
    assert f"airo logs {run_id}" in capped.lines[-1]
