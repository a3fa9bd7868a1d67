"""Orchestrator secrets (docs/spec/workload.md §6, target R5): the value reaches the workload as a
Databricks secret and appears nowhere else."""

from __future__ import annotations

import hashlib
import json
import re

from airflow_runs import (
    all_xcom_text,
    load_test_dag,
    rendered_fields_text,
    scope_keys,
    task_states,
)

HF_TOKEN = "hf_S3cr3tValueThatMustNotLeak_9c1f"
API_KEY = "api-S3cr3t-0b7e-only-in-the-vault"


def test_secret_env_values_reach_the_workload_and_nowhere_else(workspace, task_log, monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_HF_TEST",
        json.dumps({"conn_type": "generic", "login": "hf", "password": HF_TOKEN}),
    )
    monkeypatch.setenv("AIRFLOW_VAR_AIR_TEST_API_KEY", API_KEY)
    expected = hashlib.sha256((HF_TOKEN + API_KEY).encode()).hexdigest()
    command = (
        "python3 -c 'import os, hashlib; "
        'print("digest", hashlib.sha256((os.environ["HF_TOKEN"] + os.environ["API_KEY"])'
        ".encode()).hexdigest())'"
    )
    dag = load_test_dag("air_test_secrets")
    dag_run = dag.test(run_conf={"command": command})
    assert task_states(dag_run) == {"run": "success"}

    logs = task_log.text()
    assert f"digest {expected}" in logs  # the workload saw both values
    places = {
        "task logs": logs,
        "XComs": all_xcom_text(dag.dag_id),
        "rendered template fields": rendered_fields_text(dag.dag_id),
        "workspace request log": json.dumps(workspace.admin.request_log()),
    }
    # Every file the workspace keeps (launch directories, code, node logs) except its own
    # database, which is where a platform keeps secret values.
    uploaded = [
        p
        for p in workspace.data_dir.rglob("*")
        if p.is_file() and not p.name.startswith("state.sqlite3")
    ]
    assert any(p.name == "command.sh" for p in uploaded)
    places["workspace files"] = "\n".join(
        p.read_bytes().decode("utf-8", "replace") for p in uploaded
    )
    for where, text in places.items():
        assert text.strip(), f"nothing read from {where}: its absence proves nothing"
        assert HF_TOKEN not in text, f"HF_TOKEN leaked into {where}"
        assert API_KEY not in text, f"API_KEY leaked into {where}"
    # The workload carried references only, to keys of this submission.
    assert re.search(
        r"air-tests/airo\.run\.[0-9a-f]{12}\.[0-9a-f]{12}\.HF_TOKEN", places["workspace files"]
    )
    # ... deleted once the run had ended.
    assert scope_keys(workspace, "air-tests") == []


def test_a_deferred_task_deletes_its_keys_after_the_trigger_fired(workspace, monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_HF_TEST",
        json.dumps({"conn_type": "generic", "login": "hf", "password": HF_TOKEN}),
    )
    dag = load_test_dag("air_test_secrets_deferred")
    command = 'test -n "$HF_TOKEN" && sleep 2'
    dag_run = dag.test(run_conf={"command": command})
    assert task_states(dag_run) == {"run": "success"}
    assert scope_keys(workspace, "air-tests-deferred") == []


def test_a_resumed_task_deletes_the_keys_its_deferring_try_wrote(workspace, task_log, monkeypatch):
    """The worker that resumes a deferred success deletes the keys the deferring try wrote,
    even when the deployment namespace reads differently by then (two first tasks of a new
    deployment racing to create it: the later write wins)."""
    import airflow_air._deployment as deployment

    monkeypatch.setenv(
        "AIRFLOW_CONN_HF_TEST",
        json.dumps({"conn_type": "generic", "login": "hf", "password": HF_TOKEN}),
    )
    reads: list[str] = []

    def namespace() -> str:
        reads.append("first-writer" if not reads else "later-writer")
        return reads[-1]

    monkeypatch.setattr(deployment, "deployment_namespace", namespace)
    dag = load_test_dag("air_test_secrets_resumed")
    dag_run = dag.test(run_conf={"command": 'test -n "$HF_TOKEN" && sleep 2'})
    assert task_states(dag_run) == {"run": "success"}
    assert "A success resumes in a worker: finish_in_triggerer=False" in task_log.text()
    assert reads[0] == "first-writer", reads  # the keys the deferring try wrote
    assert scope_keys(workspace, "air-tests-resumed") == []


def test_every_try_keeps_the_namespace_of_its_first_submit(workspace, task_log, monkeypatch):
    """A retry after the worker died reattaches and deletes the keys its first try wrote,
    under the namespace that try submitted with, even when the deployment namespace reads
    differently by then (the first tasks of a new deployment racing to create it)."""
    import airflow_air._deployment as deployment
    import airflow_air._task_run as task_run
    from airflow_runs import run_next_try, set_state

    monkeypatch.setenv(
        "AIRFLOW_CONN_HF_TEST",
        json.dumps({"conn_type": "generic", "login": "hf", "password": HF_TOKEN}),
    )
    monkeypatch.setenv("AIRFLOW_VAR_AIR_TEST_API_KEY", API_KEY)
    namespace = {"value": "first-writer"}
    monkeypatch.setattr(deployment, "deployment_namespace", lambda: namespace["value"])
    wait = task_run.AirTaskRun._wait

    def worker_dies(self, client, record):
        raise RuntimeError("the worker died after the submit")

    monkeypatch.setattr(task_run.AirTaskRun, "_wait", worker_dies)
    dag = load_test_dag("air_test_secrets")
    dag_run = dag.test(run_conf={"command": "sleep 2"})
    assert task_states(dag_run) == {"run": "failed"}
    assert scope_keys(workspace, "air-tests")  # the first try's keys, left behind

    monkeypatch.setattr(task_run.AirTaskRun, "_wait", wait)
    namespace["value"] = "later-writer"
    set_state(dag.dag_id, dag_run.run_id, "run", "up_for_retry")
    seen = len(task_log.events)
    assert run_next_try(dag, dag_run.run_id, "run") == "success"
    retry = "\n".join(str(event.get("event")) for event in task_log.events[seen:])
    assert "Reattaching to run" in retry
    assert workspace.admin.counters()["runs_created"] == 1
    assert scope_keys(workspace, "air-tests") == []
