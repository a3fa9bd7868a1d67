"""AirRunOperator against the local workspace over real HTTP, run by Airflow's own ``dag.test()``
(which runs deferred tasks' triggers inline)."""

from __future__ import annotations

import json
import logging
import re
from collections import Counter

import pytest
from airflow_air.links import AirMlflowRunLink, AirRunLink
from airflow_runs import load_test_dag, run_next_try, set_state, task_states, xcom

from air_runtime import AirClient


def _client(workspace) -> AirClient:
    return AirClient(workspace.host, workspace.token)


def _lasting(dag_id: str, command: str) -> str:
    """The deferred variant's run must still be going when the task checks it (a run that has
    already ended is finished without deferring)."""
    return f"sleep 2; {command}" if dag_id == "air_test_deferred" else command


SUBMIT_IN_TRIGGERER = "air_test_submit_in_triggerer"


@pytest.mark.parametrize("dag_id", ["air_test_sync", "air_test_deferred", SUBMIT_IN_TRIGGERER])
def test_success(workspace, task_log, dag_id):
    dag = load_test_dag(dag_id)
    dag_run = dag.test(run_conf={"command": _lasting(dag_id, 'echo "hello from rank $POD_RANK"')})
    assert task_states(dag_run) == {"run": "success"}

    result = xcom(dag_id, dag_run.run_id, "run")
    run_id = xcom(dag_id, dag_run.run_id, "run", "run_id")
    assert result["run_id"] == run_id
    assert result["result_state"] == "SUCCESS"
    assert result["run_page_url"] == f"{workspace.host}/jobs/runs/{run_id}"
    assert xcom(dag_id, dag_run.run_id, "run", "run_page_url") == result["run_page_url"]
    # The run page link reads the run_page_url XCom itself: one XCom, written once per try.
    assert AirRunLink().xcom_key == "run_page_url"
    assert AirMlflowRunLink().xcom_key == "mlflow_run_url"
    assert xcom(dag_id, dag_run.run_id, "run", "_link_AirRunLink") is None
    with _client(workspace) as client:
        assert client.get_run(run_id).result_state == "SUCCESS"
    assert workspace.admin.counters()["runs_created"] == 1

    out = task_log.text()
    # The node's lines in the task log (streamed, or copied once the deferred run ended),
    # labelled with task, node and attempt.
    assert "node 0 attempt 0] hello from rank 0" in out
    assert result["gpu_hours"] > 0
    if dag_id == "air_test_sync":
        assert "Pausing task as DEFERRED" not in out
    else:
        assert "Pausing task as DEFERRED" in out
        assert f"Run {run_id}: TERMINATED/SUCCESS" in out
    submitted_by_trigger = "Deferring before the submit: the triggerer submits run" in out
    assert submitted_by_trigger == (dag_id == SUBMIT_IN_TRIGGERER), out


def test_a_run_the_trigger_submitted_is_the_one_a_retry_finds(workspace, task_log):
    """The plan a deferring try hands its trigger carries the token the worker's own submit
    uses (generation 0.0 of the task instance), and the trigger writes no task-state record:
    a retry (worker path) finds the trigger's run by that token, not a second run."""
    dag = load_test_dag(SUBMIT_IN_TRIGGERER)
    dag_run = dag.test(run_conf={"command": "echo planned"})
    assert task_states(dag_run) == {"run": "success"}
    run_id = xcom(SUBMIT_IN_TRIGGERER, dag_run.run_id, "run", "run_id")
    set_state(dag.dag_id, dag_run.run_id, "run", "up_for_retry")
    seen = len(task_log.events)
    assert run_next_try(dag, dag_run.run_id, "run") == "success"
    retry = "\n".join(" ".join(f"{k}={v}" for k, v in e.items()) for e in task_log.events[seen:])
    assert f"Reattached to run {run_id}" in retry, retry
    assert "Submitting in the worker: a retry looks for the run of an earlier try first" in retry
    assert xcom(dag.dag_id, dag_run.run_id, "run")["run_id"] == run_id
    assert workspace.admin.counters()["runs_created"] == 1


def test_a_try_with_secret_env_submits_in_the_worker_all_the_same(workspace, task_log, monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_HF_TEST",
        json.dumps({"conn_type": "generic", "login": "hf", "password": "hf-secret-value-4711"}),
    )
    dag_run = load_test_dag("air_test_submit_in_triggerer_secrets").test(
        run_conf={"command": "sleep 2; echo ok"}
    )
    assert task_states(dag_run) == {"run": "success"}
    out = task_log.text()
    assert "Submitting in the worker: its secret_env values are stored from the worker" in out
    assert "Deferring before the submit" not in out
    assert "hf-secret-value-4711" not in out


def _log_requests(caplog) -> None:
    """Capture the request lines of our client (httpx) and of the Task SDK's execution API
    client (httpx on Airflow 3.3, httpx2 on 3.4)."""
    for logger in ("httpx", "httpx2"):
        caplog.set_level(logging.INFO, logger=logger)


def _xcom_writes(caplog, dag_id: str) -> Counter:
    """How often each XCom of ``dag_id``'s task was written, read off the log of the
    execution API requests (every write is one ``POST /xcoms/<dag>/<run>/<task>/<key>``)."""
    request = re.compile(rf"HTTP Request: POST \S+/xcoms/{dag_id}/\S+/run/(\w+) ")
    return Counter(m.group(1) for m in map(request.search, caplog.messages) if m)


@pytest.mark.parametrize("dag_id", ["air_test_sync", "air_test_deferred", SUBMIT_IN_TRIGGERER])
def test_a_try_writes_each_xcom_once(workspace, caplog, dag_id):
    """Airflow writes every extra link's XCom when a worker run ends; a try writes each of
    its XComs once all the same: a deferring worker run leaves no empty MLflow link, the one
    that resumes writes neither link again."""
    _log_requests(caplog)
    dag = load_test_dag(dag_id)
    dag_run = dag.test(run_conf={"command": _lasting(dag_id, "echo done")})
    assert task_states(dag_run) == {"run": "success"}
    writes = _xcom_writes(caplog, dag_id)
    assert writes["run_id"] == writes["run_page_url"] == writes["return_value"] == 1, writes
    assert set(writes.values()) == {1}, writes
    for key in writes:
        assert xcom(dag_id, dag_run.run_id, "run", key) not in (None, ""), key


def test_a_try_that_submitted_nothing_writes_no_link(workspace, caplog, monkeypatch):
    """A try refused before it submits (a revoked token) has no URL: no link XCom at all,
    rather than an empty one per link."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_DATABRICKS_DEFAULT",
        json.dumps({"conn_type": "databricks", "host": workspace.host, "password": "dapi-revoked"}),
    )
    _log_requests(caplog)
    dag = load_test_dag("air_test_sync")
    dag_run = dag.test()
    assert task_states(dag_run) == {"run": "failed"}
    # Both kinds of request are in the log (else no XCom write could be seen either).
    assert any("/scim/v2/Me" in m for m in caplog.messages)
    assert any("/task-instances/" in m for m in caplog.messages), caplog.messages
    assert not _xcom_writes(caplog, "air_test_sync"), caplog.messages
    assert workspace.admin.counters()["runs_created"] == 0


@pytest.mark.parametrize("dag_id", ["air_test_sync", "air_test_deferred", SUBMIT_IN_TRIGGERER])
def test_failure_carries_the_platform_message(workspace, task_log, dag_id):
    dag = load_test_dag(dag_id)
    dag_run = dag.test(
        run_conf={"command": _lasting(dag_id, "echo 'loss went to nan' >&2; exit 3")}
    )
    assert task_states(dag_run) == {"run": "failed"}
    run_id = xcom(dag_id, dag_run.run_id, "run", "run_id")
    out = task_log.text()
    assert ("Pausing task as DEFERRED" in out) == (dag_id != "air_test_sync")
    assert "AirRunFailedError" in out
    assert f"Run {run_id}" in out and "ended FAILED" in out
    assert "Script failed with exit code 3" in out
    assert "loss went to nan" in out
    # One message: the reason once (the platform repeats it in four places), the last lines
    # once, the links; and the MLflow link filled although the run failed.
    message = out[out.index("AirRunFailedError: Run") : out.index("Run page:")]
    assert message.count("Script failed with exit code 3") == 2, message  # reason + log line
    assert message.count("| loss went to nan") == 1, message
    assert "Failed task: " in message and "node 0" in message, message
    mlflow_url = xcom(dag_id, dag_run.run_id, "run", "mlflow_run_url")
    assert mlflow_url.startswith(f"{workspace.host}/ml/experiments/"), mlflow_url
    assert "MLflow: experiment " in message and mlflow_url in message, message


def test_deferred_timeout_cancels_the_run(workspace, task_log):
    dag = load_test_dag("air_test_deferred_timeout")
    dag_run = dag.test(run_conf={"command": "sleep 120"})
    assert task_states(dag_run) == {"run": "failed"}
    run_id = xcom(dag.dag_id, dag_run.run_id, "run", "run_id")
    with _client(workspace) as client:
        state = client.wait(run_id, timeout=30, poll_interval=0.2)
    assert state.result_state == "CANCELED"
    out = task_log.text()
    assert (
        f"execution_timeout reached while run {run_id} was still RUNNING; "
        f"run {run_id} was cancelled"
    ) in out
    assert "keeps running" not in out  # it does not: it was cancelled
    assert "AirflowTaskTimeout" in out


def test_failed_run_then_retry_starts_a_new_run(workspace, tmp_path):
    """A retry after the run failed is a new generation: a second run, which succeeds."""
    marker = tmp_path / "failed-once"
    dag = load_test_dag("air_test_crash")
    command = f"test -f {marker} || {{ touch {marker}; exit 1; }}"
    dag_run = dag.test(run_conf={"command": command})
    assert task_states(dag_run) == {"run": "success"}
    counters = workspace.admin.counters()
    assert counters["runs_created"] == 2
    assert sorted(counters["submits_per_token"].values()) == [1, 1]
