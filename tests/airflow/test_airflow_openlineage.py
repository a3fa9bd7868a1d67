"""OpenLineage events of a real ``dag.test()`` (file transport): the AI Runtime run as a run
facet, the workload's volumes and MLflow run as datasets, and the parent job info the workload
received in its environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from airflow_runs import TEST_DAGS

from air_runtime import AirClient

_RUN_DAG = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("air_test_dags", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
state = module.openlineage_dag.test().state
sys.exit(0 if str(getattr(state, "value", state)) == "success" else 1)
"""


def test_openlineage_events_carry_the_run_and_its_datasets(workspace, tmp_path):
    events_file = tmp_path / "events.jsonl"
    env = {
        **os.environ,
        # OpenLineage reads its settings once per process: a process of its own.
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "log_file_path": str(events_file), "append": True}
        ),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "air-tests",
    }
    done = subprocess.run(
        [sys.executable, "-c", _RUN_DAG, str(TEST_DAGS / "air_test_dags.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    events = [json.loads(line) for line in events_file.read_text().splitlines() if line.strip()]
    task_events = {
        e["eventType"]: e for e in events if e["job"]["name"] == "air_test_openlineage.train"
    }
    assert {"START", "COMPLETE"} <= set(task_events), [e["eventType"] for e in events]
    start, complete = task_events["START"], task_events["COMPLETE"]
    # At start: what the workload declares.
    assert start["run"]["facets"]["airRuntimeRun"]["experiment"] == "lineage"
    assert {"namespace": "dbfs", "name": "/Volumes/main/ml/data"} in [
        {k: d[k] for k in ("namespace", "name")} for d in start["inputs"]
    ]
    # At the end: the run, its MLflow ids, and the outputs.
    facet = complete["run"]["facets"]["airRuntimeRun"]
    run_id = facet["runId"]
    assert isinstance(run_id, int) and facet["runPageUrl"].startswith(workspace.host)
    assert facet["resultState"] == "SUCCESS" and facet["mlflowRunId"]
    assert complete["run"]["facets"]["externalQuery"]["externalQueryId"] == str(run_id)
    outputs = {(d["namespace"], d["name"]) for d in complete["outputs"]}
    assert any(
        ns == "dbfs" and name.startswith("/Volumes/main/ml/out/manual__") for ns, name in outputs
    )
    mlflow = f"/ml/experiments/{facet['mlflowExperimentId']}/runs/{facet['mlflowRunId']}"
    assert (workspace.host.rstrip("/"), mlflow) in outputs

    # The workload got the task's OpenLineage ids in its environment.
    with AirClient(workspace.host, workspace.token) as client:
        logs = "".join(r.body for r in client.iter_logs(run_id, node=0))
    task_run = complete["run"]["runId"]
    parent = complete["run"]["facets"]["parent"]
    root = parent["root"]
    assert f"parent=air-tests/air_test_openlineage.train/{task_run}" in logs, logs
    assert f"root=air-tests/air_test_openlineage/{root['run']['runId']}" in logs, logs
