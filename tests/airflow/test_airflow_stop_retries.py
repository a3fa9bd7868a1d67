"""The default failure policy in Airflow: a run whose attempt ran out of GPU memory
(deterministic) is cancelled before the platform's retries run their course, and its task
fails at once (no Airflow retry either), the diagnosis first, waiting in the worker or
deferred; a collective timeout (infrastructure) is retried by the platform, the task log
saying so; ``stop_deterministic_retries=False`` still lets the platform retry anything. The
Dag: dag_files/air_test_stop_retries.py."""

from __future__ import annotations

import re
from pathlib import Path

from airflow_runs import load_test_dag, task_states, xcom

from air_runtime import AirClient

DAG_ID = "air_test_stop_retries"
STOPPED = re.compile(
    r"CUDA out of memory on node 0 \(deterministic, task oom, retry 0 of 3\): reduce the batch "
    r"size or use more accelerators; retries will not help; further retries of run (\d+) "
    r"stopped \(failure_policy: deterministic -> stop\); (?:run \d+ was )?cancelled"
)
RETRIED = (
    "NCCL collective operation timed out on node 0 (infrastructure): retry 1 of 3 follows (a "
    "rank stalled or died before the collective: read the other nodes' last lines)"
)


def _executions(marks: Path, task_id: str) -> int:
    return len((marks / f"{task_id}.count").read_text().splitlines())


def test_the_failure_policy_decides_the_platform_retries(workspace, task_log, tmp_path):
    dag = load_test_dag(DAG_ID, "air_test_stop_retries.py")
    dag_run = dag.test(run_conf={"marks": str(tmp_path)})
    log = task_log.text()
    assert task_states(dag_run) == {
        "in_worker": "failed",
        "deferred": "failed",
        "nccl": "success",
        "legacy": "success",
    }, log
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
        for task_id in ("nccl", "legacy"):
            run_id = int(xcom(DAG_ID, dag_run.run_id, task_id, "run_id"))
            state = client.get_run(run_id)
            assert [(a.attempt_number, a.result_state) for a in state.task_attempts()] == [
                (0, "FAILED"),
                (1, "SUCCESS"),
            ]
            assert _executions(tmp_path, task_id) == 2
    # The decision is the first line the log shows of the failure, in the triggerer's log.
    assert RETRIED in log, log
    # stop_deterministic_retries=False: a deterministic failure the platform retries.
    assert "CUDA out of memory on node 0 (deterministic): retry 1 of 3 follows" in log, log
    # One try each: AirflowFailException, no Airflow retry.
    tries = {ti.task_id: ti.try_number for ti in dag_run.get_task_instances()}
    assert tries == {"in_worker": 1, "deferred": 1, "nccl": 1, "legacy": 1}
