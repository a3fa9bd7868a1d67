"""AirRegisterImageOperator: public (deferred) and private (credentials from a connection)
images on the local workspace; registering again is a no-op."""

from __future__ import annotations

import json

import pytest
from airflow_runs import load_test_dag, task_states, xcom

from air_runtime.local import start_local_workspace

DOCKER_PASSWORD = "dckr_pat_NotForLogs_51a0"


@pytest.fixture
def image_workspace(tmp_path, airflow_db, monkeypatch):
    workspace = start_local_workspace(
        data_dir=tmp_path / "ws",
        image_delay_s=0.5,
        private_images={"acme/private-trainer": {"user": "acme", "password": DOCKER_PASSWORD}},
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_DATABRICKS_DEFAULT",
        json.dumps(
            {"conn_type": "databricks", "host": workspace.host, "password": workspace.token}
        ),
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_DOCKERHUB_TEST",
        json.dumps({"conn_type": "generic", "login": "acme", "password": DOCKER_PASSWORD}),
    )
    try:
        yield workspace
    finally:
        workspace.stop()


def test_register_images_then_skip_when_available(image_workspace, task_log):
    dag = load_test_dag("air_test_images")
    first = dag.test()
    assert task_states(first) == {
        "public_deferred": "success",
        "private_with_connection": "success",
    }
    for task_id in ("public_deferred", "private_with_connection"):
        digest = xcom(dag.dag_id, first.run_id, task_id)
        assert isinstance(digest, str) and digest.startswith("sha256:"), digest
    registrations = image_workspace.admin.counters()["requests"]["ai-compute-manager/images"]

    second = dag.test()
    assert task_states(second) == {
        "public_deferred": "success",
        "private_with_connection": "success",
    }
    counters = image_workspace.admin.counters()["requests"]
    assert counters["ai-compute-manager/images"] == registrations  # nothing registered again
    logs = task_log.text()
    assert "already AVAILABLE; nothing to do" in logs
    assert DOCKER_PASSWORD not in logs
