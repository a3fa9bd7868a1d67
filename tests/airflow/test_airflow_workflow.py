"""AirWorkflowTaskGroup: stages submitted as one multi-task run, each its own Airflow task."""

from __future__ import annotations

from airflow_runs import load_test_dag, task_states, xcom

from air_runtime import AirClient


def test_workflow_is_one_run_with_one_task_per_stage(workspace):
    dag = load_test_dag("air_test_workflow")
    dag_run = dag.test()
    assert task_states(dag_run) == {
        "pipeline.submit": "success",
        "pipeline.first": "success",
        "pipeline.second": "success",
    }
    run_ids = {
        task: xcom(dag.dag_id, dag_run.run_id, task, "run_id")
        for task in ("pipeline.submit", "pipeline.first", "pipeline.second")
    }
    assert len(set(run_ids.values())) == 1
    assert workspace.admin.counters()["runs_created"] == 1
    with AirClient(workspace.host, workspace.token) as client:
        state = client.get_run(run_ids["pipeline.submit"])
    assert state.is_success
    assert sorted(t.task_key for t in state.tasks) == ["first", "second"]
    second = xcom(dag.dag_id, dag_run.run_id, "pipeline.second")
    assert second["task_key"] == "second" and second["result_state"] == "SUCCESS"


def test_failed_stage_fails_its_task_and_skips_the_next(workspace, task_log):
    dag = load_test_dag("air_test_workflow")
    dag_run = dag.test(run_conf={"first": "echo broken >&2; exit 2", "second": "echo never"})
    states = task_states(dag_run)
    assert states["pipeline.submit"] == "success"
    assert states["pipeline.first"] == "failed"
    assert states["pipeline.second"] == "upstream_failed"
    out = task_log.text()
    assert "Script failed with exit code 2" in out
