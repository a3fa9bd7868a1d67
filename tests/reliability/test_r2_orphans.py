"""R2 orphaned runs: whenever the orchestrator gives up on a task, the remote run is
cancelled, within 30 s, in every trial.

- ``sync_killed``: a running (worker-side) Airflow task gets SIGTERM, which is how
  Airflow's supervisor stops a task that was killed or marked failed: the task runner's
  handler calls ``on_kill``;
- ``marked_failed`` (test_airflow_daemons.py): a user marks a running or deferred task
  failed in a real Airflow deployment;
- ``sync_execution_timeout`` / ``deferred_execution_timeout``: real Airflow (``dag.test``)
  tasks with ``execution_timeout`` shorter than the run;
- ``dagster_terminated``: a Dagster run in its own process gets SIGINT (Dagster's
  termination interrupt) while its asset waits on the remote run.
"""

from __future__ import annotations

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
    check_cancelled,
    client_for,
    python_env,
    record_cancel_time,
    reliability_dag,
    running,
)

pytestmark = [pytest.mark.row("R2"), pytest.mark.timeout(900)]

LONG = "sleep 120"


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
        record_cancel_time(
            tally, check_cancelled(tally, ws, result["run_id"], killed_at[0], f"trial {trial}")
        )
        if str(run.state) != "failed":
            tally.fail(f"trial {trial}: the killed task's Dag run ended {run.state}")


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
        record_cancel_time(tally, check_cancelled(tally, ws, run_id, deadline, f"trial {trial}"))


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
            record_cancel_time(tally, check_cancelled(tally, ws, run_id, since, f"trial {trial}"))
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
