"""Budgets: a run whose GPU-hours pass ``max_gpu_hours`` is cancelled and its task fails
saying so, waiting in the worker or deferred. The Dag: dag_files/air_test_gpu_budget.py."""

from __future__ import annotations

import re

from airflow_runs import load_test_dag, task_states, xcom

from air_runtime import AirClient

DAG_ID = "air_test_gpu_budget"
BUDGET_LINE = re.compile(
    r"run (\d+) used (0\.\d+) GPU-hours, over its budget of 0\.001 \(max_gpu_hours\); cancelled"
)


def test_a_run_over_its_gpu_hours_is_cancelled_and_fails_its_task(workspace, task_log):
    dag_run = load_test_dag(DAG_ID, "air_test_gpu_budget.py").test()
    log = task_log.text()
    assert task_states(dag_run) == {"in_worker": "failed", "deferred": "failed"}, log
    messages = {int(run): float(used) for run, used in BUDGET_LINE.findall(log)}
    with AirClient(workspace.host, workspace.token) as client:
        for task_id in ("in_worker", "deferred"):
            run_id = int(xcom(DAG_ID, dag_run.run_id, task_id, "run_id"))
            assert messages[run_id] > 0.001, log  # the task failed with the budget message
            state = client.wait(run_id, timeout=60)
            assert state.result_state == "CANCELED", state
            # The run stopped within a few polls of passing the budget (8 accelerators
            # spend 0.001 GPU-hours in 0.45 s).
            assert state.gpu_hours() < 0.02, state.gpu_hours()


def test_a_stage_over_its_gpu_hours_cancels_its_run(workspace, task_log):
    dag_run = load_test_dag("air_test_stage_gpu_budget", "air_test_gpu_budget.py").test()
    log = task_log.text()
    states = task_states(dag_run)
    assert states["pipeline.train"] == "failed", (states, log)
    run_id = int(xcom("air_test_stage_gpu_budget", dag_run.run_id, "pipeline.train", "run_id"))
    assert re.search(
        rf"stage train of run {run_id} used 0\.\d+ GPU-hours, over its budget of 0\.001 "
        r"\(max_gpu_hours\); cancelled",
        log,
    ), log
    with AirClient(workspace.host, workspace.token) as client:
        state = client.wait(run_id, timeout=60)
    assert state.result_state == "CANCELED", state
    assert state.gpu_hours("train") < 0.02, state.gpu_hours("train")
