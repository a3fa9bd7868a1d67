"""Worker crash → automatic retry reattaches (one run); a human clear starts a new run; killing
a task cancels its run (worker SIGTERM, and the triggerer's user-action cancel)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time

import pytest
from airflow_runs import (
    clear_task,
    latest_dag_run,
    load_test_dag,
    run_next_try,
    set_state,
    task_instance,
    xcom,
)

from air_runtime import AirClient


def _wait_until(predicate, timeout: float = 120.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _run_records(dag_id: str) -> int:
    from airflow.models.task_state_store import TaskStateStoreModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return len(
            session.scalars(
                select(TaskStateStoreModel).where(
                    TaskStateStoreModel.dag_id == dag_id,
                    TaskStateStoreModel.key == "airflow_air.run",
                )
            ).all()
        )


def _running_run(workspace) -> int | None:
    with AirClient(workspace.host, workspace.token) as client:
        runs, _ = client.list_runs(active_only=True)
    running = [r.run_id for r in runs if r.life_cycle_state == "RUNNING"]
    return running[0] if running else None


def test_worker_crash_retry_reattaches_to_the_same_run(
    workspace, task_log, dag_test_worker, tmp_path
):
    dag = load_test_dag("air_test_crash")
    earlier = _run_records(dag.dag_id)  # other tests' Dag runs of this Dag
    # The run goes on until the worker is dead, however long the kill takes to come.
    release = tmp_path / "release"
    command = f'while [ ! -e "{release}" ]; do sleep 0.2; done; echo finished'
    dag_test_worker.start(dag.dag_id, {"command": command})
    worker = dag_test_worker.popen
    try:
        _wait_until(lambda: _run_records(dag.dag_id) > earlier, what="the run record")
    finally:
        worker.send_signal(signal.SIGKILL)  # the worker dies between submit and the end
        worker.wait(timeout=30)
        release.touch()
    dag_run = latest_dag_run(dag.dag_id)
    assert str(task_instance(dag.dag_id, dag_run.run_id, "run").state) == "running"
    # What the scheduler does when the worker's heartbeat stops: the try failed, retry it.
    set_state(dag.dag_id, dag_run.run_id, "run", "up_for_retry")

    assert run_next_try(dag, dag_run.run_id, "run") == "success"

    counters = workspace.admin.counters()
    assert counters["runs_created"] == 1
    assert list(counters["submits_per_token"].values()) == [1]  # the retry did not even resubmit
    assert "Reattaching to run" in task_log.text()
    assert xcom(dag.dag_id, dag_run.run_id, "run")["result_state"] == "SUCCESS"


def test_clear_starts_a_new_run(workspace, task_log):
    dag = load_test_dag("air_test_sync")
    dag_run = dag.test(run_conf={"command": "echo first"})
    first_run = xcom(dag.dag_id, dag_run.run_id, "run", "run_id")

    clear_task(dag.dag_id, dag_run.run_id, "run")
    assert run_next_try(dag, dag_run.run_id, "run") == "success"

    second_run = xcom(dag.dag_id, dag_run.run_id, "run", "run_id")
    assert second_run != first_run
    counters = workspace.admin.counters()
    assert counters["runs_created"] == 2
    assert sorted(counters["submits_per_token"].values()) == [1, 1]
    assert "The task was cleared since run" in task_log.text()


def test_sigterm_of_a_sync_task_cancels_its_run(workspace, dag_test_worker):
    dag = load_test_dag("air_test_sync")
    earlier = _run_records(dag.dag_id)
    dag_test_worker.start(dag.dag_id, {"command": "sleep 120"})
    worker = dag_test_worker.popen
    try:
        _wait_until(lambda: _running_run(workspace) is not None, what="a RUNNING run")
        run_id = _running_run(workspace)
        # The kill comes once the task knows its run (it records it right after the submit's
        # answer); a kill during the submit request itself leaves the run to the retry.
        _wait_until(lambda: _run_records(dag.dag_id) > earlier, what="the task's run record")
        worker.send_signal(signal.SIGTERM)  # what the supervisor sends a task being killed
        worker.wait(timeout=120)
    finally:
        if worker.poll() is None:
            worker.kill()
    with AirClient(workspace.host, workspace.token) as client:
        state = client.wait(run_id, timeout=30, poll_interval=0.2)
    assert state.result_state == "CANCELED"
    assert (
        str(task_instance(dag.dag_id, latest_dag_run(dag.dag_id).run_id, "run").state) == "failed"
    )


def _submit_sleeper(workspace) -> int:
    from air_runtime import load_workload

    workload = load_workload(
        {
            "experiment_name": "trigger_target",
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
            "command": "sleep 120",
        }
    )
    with AirClient(workspace.host, workspace.token) as client:
        run_id = client.submit_workload(workload).run_id
    _wait_until(lambda: _running_run(workspace) == run_id, what="the run to be RUNNING")
    return run_id


def _requests_served(workspace) -> int:
    return sum(workspace.admin.counters()["requests"].values())


async def _run_in_triggerer(trigger, workspace, *, user_action: bool) -> None:
    """Run the trigger in Airflow's TriggerRunner and cancel it the way the triggerer does:
    a user action on the task (on_kill runs) or a triggerer shutdown (plain cancel)."""
    from airflow.jobs.triggerer_job_runner import TriggerRunner

    runner = TriggerRunner()
    runner.triggers[1] = {"task": None, "name": "air", "events": 0, "is_watcher": False}
    before = await asyncio.to_thread(_requests_served, workspace)
    task = asyncio.create_task(runner.run_trigger(1, trigger))
    runner.triggers[1]["task"] = task
    # The trigger is waiting on the run once the workspace has seen its first poll (the
    # admin requests that read the counters are not counted).
    deadline = time.monotonic() + 120
    while await asyncio.to_thread(_requests_served, workspace) <= before:
        assert not task.done() and time.monotonic() < deadline, "the trigger never polled"
        await asyncio.sleep(0.05)
    assert not task.done()
    if user_action:
        runner.to_cancel.append(1)
        await runner.cancel_triggers()
    else:
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


@pytest.mark.parametrize("user_action", [True, False], ids=["task-killed", "triggerer-restart"])
def test_deferred_kill_cancels_but_triggerer_restart_does_not(workspace, user_action):
    from airflow_air.triggers import AirRunTrigger

    run_id = _submit_sleeper(workspace)
    trigger = AirRunTrigger(run_id, poll_interval=0.2, cancel_on_kill=True)
    asyncio.run(_run_in_triggerer(trigger, workspace, user_action=user_action))

    with AirClient(workspace.host, workspace.token) as client:
        if user_action:
            assert client.wait(run_id, timeout=30, poll_interval=0.2).result_state == "CANCELED"
        else:
            state = client.get_run(run_id)
            assert state.life_cycle_state == "RUNNING"  # a new triggerer picks the wait up
            client.cancel(run_id)
