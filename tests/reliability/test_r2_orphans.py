"""R2 orphaned runs: whenever the orchestrator gives up on a task, the remote run is
cancelled, within 30 s, in every trial.

- ``sync_killed``: a running (worker-side) Airflow task gets SIGTERM, which is how
  Airflow's supervisor stops a task that was killed or marked failed: the task runner's
  handler calls ``on_kill``;
- ``deferred_marked_failed``: the trigger of a deferred task is cancelled the way the
  triggerer does on a user action (mark failed / clear), then ``on_kill`` is awaited;
- ``sync_execution_timeout`` / ``deferred_execution_timeout``: real Airflow (``dag.test``)
  tasks with ``execution_timeout`` shorter than the run;
- ``dagster_terminated``: a Dagster run in its own process gets SIGINT (Dagster's
  termination interrupt) while its asset waits on the remote run.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
from conftest import rng_for, trials
from helpers import (
    LoopThread,
    client_for,
    first_event,
    python_env,
    reliability_dag,
    running,
    wait_for_state,
    workload,
)

pytestmark = [pytest.mark.row("R2"), pytest.mark.timeout(900)]

CANCEL_WITHIN_S = 30.0
LONG = "sleep 120"


def _cancelled(state: Any) -> bool:
    return state.is_terminal and state.result_state == "CANCELED"


def _check_cancelled(tally: Any, ws: Any, run_id: int, since: float, what: str) -> float:
    """Seconds from ``since`` (wall clock) until the run ended CANCELED, from the run's own
    end time; an orphan when it did not end so within 30 s."""
    with client_for(ws) as client:
        budget = max(CANCEL_WITHIN_S - (time.time() - since), 1.0)
        state = wait_for_state(client, run_id, _cancelled, budget)
    ended = (state.end_time / 1000.0) if state.end_time else time.time()
    took = ended - since
    if not _cancelled(state) or took > CANCEL_WITHIN_S:
        tally.orphans += 1
        tally.fail(f"{what}: run {run_id} is {state.describe()} {took:.1f}s after")
        with client_for(ws) as client:  # do not leave it running for the next trial
            client.cancel(run_id)
    return took


def _newest_run_id(ws: Any, before: set[int]) -> int | None:
    with client_for(ws) as client:
        runs, _ = client.list_runs(active_only=True)
    fresh = [r.run_id for r in runs if r.run_id not in before]
    return max(fresh) if fresh else None


def _active_ids(ws: Any) -> set[int]:
    with client_for(ws) as client:
        runs, _ = client.list_runs(active_only=False)
    return {r.run_id for r in runs}


def _wait_new_running_run(ws: Any, before: set[int], timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run_id = _newest_run_id(ws, before)
        if run_id is not None:
            with client_for(ws) as client:
                if running(client.get_run(run_id)):
                    return run_id
        time.sleep(0.1)
    raise AssertionError("no remote run started")


def _record_times(tally: Any, took: float) -> None:
    times = tally.notes.setdefault("cancel_seconds", [])
    times.append(round(took, 2))
    tally.notes["max_cancel_s"] = max(times)


def test_sync_killed(airflow_workspace, tally) -> None:
    ws = airflow_workspace
    rng = rng_for("R2-sync-killed")
    dag = reliability_dag("reliability_sync")
    for trial in range(trials(1, 6)):
        tally.trials += 1
        before = _active_ids(ws)
        result: dict[str, Any] = {}
        previous = signal.getsignal(signal.SIGTERM)
        killed_at: list[float] = []

        def kill_when_running(
            before: set[int] = before,
            result: dict[str, Any] = result,
            killed_at: list[float] = killed_at,
        ) -> None:
            try:
                run_id = _wait_new_running_run(ws, before)
                time.sleep(rng.uniform(0.0, 1.5))
                result["run_id"] = run_id
                killed_at.append(time.time())
                os.kill(os.getpid(), signal.SIGTERM)  # the supervisor's signal
            except Exception as exc:
                result["error"] = exc

        killer = threading.Thread(target=kill_when_running, daemon=True)
        killer.start()
        try:
            run = dag.test(run_conf={"command": LONG})
        finally:
            signal.signal(signal.SIGTERM, previous)
        killer.join(timeout=60)
        if "error" in result or not killed_at:
            tally.crashes += 1
            tally.fail(f"trial {trial}: {result.get('error')}")
            continue
        _record_times(
            tally, _check_cancelled(tally, ws, result["run_id"], killed_at[0], f"trial {trial}")
        )
        if str(run.state) != "failed":
            tally.fail(f"trial {trial}: the killed task's Dag run ended {run.state}")


def test_deferred_marked_failed(airflow_workspace, tally) -> None:
    from airflow.jobs.triggerer_job_runner import _ON_CANCEL_TIMEOUT, _USER_ACTION_CANCEL_MSG
    from airflow_air.triggers import AirRunTrigger

    ws = airflow_workspace
    rng = rng_for("R2-deferred-marked-failed")
    for trial in range(trials(1, 6)):
        tally.trials += 1
        with client_for(ws) as client:
            submitted = client.submit_workload(workload(f"r2-mark-{trial}", LONG))
            wait_for_state(client, submitted.run_id, running, 30)
        trigger = AirRunTrigger(submitted.run_id, poll_interval=0.2)
        loop = LoopThread()

        async def triggerer_runs(trigger: AirRunTrigger = trigger) -> None:
            task = asyncio.ensure_future(first_event(trigger))
            await asyncio.sleep(rng.uniform(0.1, 1.5))
            task.cancel(_USER_ACTION_CANCEL_MSG)  # what cancel_triggers() does
            try:
                await task
            except asyncio.CancelledError:
                await asyncio.wait_for(trigger.on_kill(), timeout=_ON_CANCEL_TIMEOUT)

        since = time.time()
        try:
            loop.submit(triggerer_runs()).result(timeout=60)
        finally:
            loop.close()
        _record_times(tally, _check_cancelled(tally, ws, submitted.run_id, since, f"trial {trial}"))


def test_sync_execution_timeout(airflow_workspace, tally, capfd) -> None:
    _timeout_campaign(airflow_workspace, tally, capfd, "reliability_sync_timeout")


def test_deferred_execution_timeout(airflow_workspace, tally, capfd) -> None:
    _timeout_campaign(airflow_workspace, tally, capfd, "reliability_deferred_timeout")


def _timeout_campaign(ws: Any, tally: Any, capfd: Any, dag_id: str) -> None:
    dag = reliability_dag(dag_id)
    limit = dag.task_dict["run"].execution_timeout.total_seconds()
    for trial in range(trials(1, 6)):
        tally.trials += 1
        before = _active_ids(ws)
        capfd.readouterr()
        run = dag.test(run_conf={"command": LONG})
        log = "".join(capfd.readouterr())
        if str(run.state) != "failed":
            tally.fail(f"trial {trial}: the timed-out Dag run ended {run.state}")
        if "AirflowTaskTimeout" not in log or "TypeError" in log:
            tally.crashes += 1
            tally.fail(f"trial {trial}: the task did not fail with AirflowTaskTimeout")
        with client_for(ws) as client:
            runs, _ = client.list_runs(active_only=False)
        fresh = [r.run_id for r in runs if r.run_id not in before]
        if len(fresh) != 1:
            tally.crashes += 1
            tally.fail(f"trial {trial}: {len(fresh)} remote runs started")
            continue
        run_id = fresh[0]
        # The deadline is the try's start + execution_timeout; count from there.
        ti = run.get_task_instance("run")
        deadline = (ti.start_date.timestamp() if ti and ti.start_date else time.time()) + limit
        _record_times(tally, _check_cancelled(tally, ws, run_id, deadline, f"trial {trial}"))


_DAGSTER_SCRIPT = """
import sys
import dagster as dg
from dagster_air import AirStage, AirWorkspace, build_air_assets
host, token, name = sys.argv[1:4]
assets = build_air_assets(AirStage(key=name, workload={
    "experiment_name": name,
    "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
    "max_retries": 0, "command": "sleep 120"}))
workspace = AirWorkspace(host=host, token=token, poll_interval=0.2, cancel_wait=20)
with dg.DagsterInstance.ephemeral() as instance:
    result = dg.materialize([assets], resources={"air_workspace": workspace},
                            instance=instance, raise_on_error=False)
    print("DAGSTER_SUCCESS" if result.success else "DAGSTER_FAILED", flush=True)
"""


def test_dagster_terminated(workspace, tally, tmp_path) -> None:
    ws = workspace
    rng = rng_for("R2-dagster")
    for trial in range(trials(1, 4)):
        tally.trials += 1
        before = _active_ids(ws)
        env = python_env({"DAGSTER_HOME": str(tmp_path)})
        proc = subprocess.Popen(
            [sys.executable, "-c", _DAGSTER_SCRIPT, ws.host, ws.token, f"r2_dagster_{trial}"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            run_id = _wait_new_running_run(ws, before, timeout=90)
            time.sleep(rng.uniform(0.0, 1.5))
            since = time.time()
            proc.send_signal(signal.SIGINT)
            _record_times(tally, _check_cancelled(tally, ws, run_id, since, f"trial {trial}"))
            out, _ = proc.communicate(timeout=60)
            if "DAGSTER_SUCCESS" in out:
                tally.fail(f"trial {trial}: the terminated Dagster run succeeded")
        except Exception as exc:
            tally.crashes += 1
            tally.fail(f"trial {trial}: {type(exc).__name__}: {exc}")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
