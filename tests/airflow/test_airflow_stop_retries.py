"""``stop_deterministic_retries``: a run whose attempt ran out of GPU memory is cancelled
before the platform's retries run their course, and its task fails at once (no Airflow retry
either), the diagnosis first, waiting in the worker or deferred. The Dag:
dag_files/air_test_stop_retries.py."""

from __future__ import annotations

import re

from airflow_runs import load_test_dag, task_states, xcom

from air_runtime import AirClient

DAG_ID = "air_test_stop_retries"
STOPPED = re.compile(
    r"CUDA out of memory on node 0 \(task oom, retry 0 of 3\): reduce the batch size or use "
    r"more accelerators; retries will not help; further retries of run (\d+) stopped "
    r"\(stop_deterministic_retries\); (?:run \d+ was )?cancelled"
)


def test_a_deterministic_failure_cancels_the_run_and_fails_the_task(workspace, task_log, tmp_path):
    dag = load_test_dag(DAG_ID, "air_test_stop_retries.py")
    dag_run = dag.test(run_conf={"marks": str(tmp_path)})
    log = task_log.text()
    assert task_states(dag_run) == {"in_worker": "failed", "deferred": "failed"}, log
    stopped = {int(run) for run in STOPPED.findall(log)}
    with AirClient(workspace.host, workspace.token) as client:
        for task_id in ("in_worker", "deferred"):
            run_id = int(xcom(DAG_ID, dag_run.run_id, task_id, "run_id"))
            assert run_id in stopped, log
            state = client.wait(run_id, timeout=60)
            assert state.result_state == "CANCELED", state.describe()
            attempts = [(a.attempt_number, a.result_state) for a in state.task_attempts()]
            # Attempt 0 failed; at most the retry the platform had started was cancelled.
            assert attempts[0] == (0, "FAILED") and len(attempts) <= 2, attempts
    # One try each: AirflowFailException, no Airflow retry.
    assert {ti.task_id: ti.try_number for ti in dag_run.get_task_instances()} == {
        "in_worker": 1,
        "deferred": 1,
    }
