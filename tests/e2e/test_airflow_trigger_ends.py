"""Deferred tasks on a real scheduler + triggerer (LocalExecutor, PostgreSQL): a success the
trigger ends itself (one worker run) leaves what a success resumed in a worker leaves; a
failure still resumes in a worker with the rich error; a deferral that Airflow times out
while the triggerer is down cancels the run. The same with ``submit_in_triggerer`` (the
trigger submits the planned run)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from airflow_deployment import (
    E2E_DIR,
    AirflowDeployment,
    add_airflow_connections,
    check_air_task_instances,
    task_log_holding,
    task_log_text,
)
from managed_process import own_database

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


def _deployment(tmp_path: Path, postgres: str) -> AirflowDeployment:
    return AirflowDeployment(
        tmp_path,
        executor="LocalExecutor",
        database_dsn=own_database(postgres, "airo_airflow_trigger_ends"),
        dag_folders={"e2e": E2E_DIR / "dags"},
        extra_env={
            # Airflow's own deferral timeout: 20 s of execution_timeout plus 5 s.
            "AIRFLOW__AIR__DEFER_TIMEOUT_GRACE": "5",
            "AIRFLOW__SCHEDULER__TRIGGER_TIMEOUT_CHECK_INTERVAL": "2",
        },
    )


def _wait_for(what: str, condition, deployment: AirflowDeployment, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not after {timeout:.0f}s\n{deployment.logs()}")
        time.sleep(1)


def test_success_ends_in_the_triggerer_failure_and_timeout_in_a_worker(
    tmp_path: Path, postgres: str, local_workspace, workspace_client
) -> None:
    deployment = _deployment(tmp_path, postgres)
    try:
        deployment.migrate()
        deployment.start()
        add_airflow_connections(deployment, local_workspace)
        deployment.wait_for_dags(
            [
                "air_finish",
                "air_finish_failure",
                "air_trigger_timeout",
                "air_submit_in_triggerer",
                "air_trigger_timeout_planned",
            ]
        )

        finish_run = deployment.trigger("air_finish")
        failure_run = deployment.trigger("air_finish_failure")
        planned_run = deployment.trigger("air_submit_in_triggerer")
        states = deployment.wait_for_runs(
            [
                ("air_finish", finish_run),
                ("air_finish_failure", failure_run),
                ("air_submit_in_triggerer", planned_run),
            ],
            timeout=300,
        )
        assert states[("air_finish", finish_run)]["state"] == "success", deployment.diagnose(
            [("air_finish", finish_run)]
        )

        # -- a success: one worker run when the trigger ends it, two when it resumes
        remote = check_air_task_instances(deployment, "air_finish", finish_run, workspace_client)
        assert set(remote) == {"ends_in_triggerer", "ends_in_worker"}
        runs = deployment.worker_runs("air_finish", finish_run)
        assert runs[("ends_in_triggerer", -1)] == 1, runs
        assert runs[("ends_in_worker", -1)] == 2, runs
        # The same XComs and links, filled the same way.
        keys = {t: deployment.xcom_keys("air_finish", finish_run, t) for t in remote}
        assert keys["ends_in_triggerer"] == keys["ends_in_worker"], keys
        assert {"return_value", "run_id", "run_page_url", "gpu_hours", "mlflow_run_url"} <= keys[
            "ends_in_triggerer"
        ]
        results = {t: deployment.xcom("air_finish", finish_run, t, "return_value") for t in remote}
        for task_id, result in results.items():
            assert result["run_id"] == remote[task_id] and result["result_state"] == "SUCCESS"
            assert result["gpu_hours"] > 0, result
            assert (
                deployment.xcom("air_finish", finish_run, task_id, "gpu_hours")
                == (result["gpu_hours"])
            )
        assert set(results["ends_in_triggerer"]) == set(results["ends_in_worker"])
        links = {t: deployment.extra_links("air_finish", finish_run, t) for t in remote}
        assert set(links["ends_in_triggerer"]) == set(links["ends_in_worker"]), links
        # The node's lines, labelled as in the worker, and the success line.
        for task_id in remote:
            succeeded = f"Run {remote[task_id]} succeeded"
            log = task_log_holding(deployment, "air_finish", finish_run, task_id, succeeded)
            label = f"[{task_id} node 0 attempt 0]"
            assert f"{label} first line of {task_id}" in log, log[-3000:]
            assert f"{label} last line of {task_id}" in log, log[-3000:]
            assert succeeded in log, log[-3000:]
            assert "hf-placeholder-not-a-token" not in log
        # Both deleted their submission's secret keys.
        left = [s.key for s in workspace_client.list_secrets("airflow-air")]
        assert not [k for k in left if ".ends_in_" in k], left

        # -- submitted by its trigger: one worker run, which sent no submit; the same XComs
        # and links as the run the worker submitted, written by the triggerer
        planned = ("air_submit_in_triggerer", planned_run)
        assert states[planned]["state"] == "success", deployment.diagnose([planned])
        planned_remote = check_air_task_instances(deployment, *planned, workspace_client)
        assert set(planned_remote) == {"submitted_by_trigger"}
        assert deployment.worker_runs(*planned)[("submitted_by_trigger", -1)] == 1
        assert deployment.xcom_keys(*planned, "submitted_by_trigger") == keys["ends_in_triggerer"]
        assert set(deployment.extra_links(*planned, "submitted_by_trigger")) == set(
            links["ends_in_triggerer"]
        )
        result = deployment.xcom(*planned, "submitted_by_trigger", "return_value")
        assert result["run_id"] == planned_remote["submitted_by_trigger"], result
        assert set(result) == set(results["ends_in_triggerer"])
        last = "[submitted_by_trigger node 0 attempt 0] last line of"
        log = task_log_holding(deployment, *planned, "submitted_by_trigger", last)
        assert "Deferring before the submit: the triggerer submits run" in log, log[-3000:]
        assert f"Submitted run {result['run_id']}" in log, log[-3000:]
        assert last in log, log[-3000:]

        # -- a failure resumes in a worker and raises the rich error there
        failed = deployment.task_instance("air_finish_failure", failure_run, "fails")
        assert failed["state"] == "failed", failed
        assert deployment.worker_runs("air_finish_failure", failure_run)[("fails", -1)] == 2
        log = task_log_text(deployment, "air_finish_failure", failure_run, "fails")
        assert "AirRunFailedError" in log and "exit code 3" in log, log[-3000:]
        assert "about to exit 3" in log, log[-3000:]

        # -- Airflow times the deferral out while no triggerer runs: the run is cancelled.
        # The triggerer is down before the task defers, so only Airflow's timeout can end it.
        deployment.kill_service("triggerer")
        timeout_run = deployment.trigger("air_trigger_timeout")
        # A planned run was never submitted: the task that cancels submits it (same token,
        # so a trigger still submitting would get the same run) and cancels it.
        planned_timeout = deployment.trigger("air_trigger_timeout_planned")
        for dag_id, dag_run in (
            ("air_trigger_timeout", timeout_run),
            ("air_trigger_timeout_planned", planned_timeout),
        ):
            _wait_for(
                f"the held task of {dag_id} failed",
                lambda d=dag_id, r=dag_run: (
                    deployment.task_instance(d, r, "held")["state"] == "failed"
                ),
                deployment,
            )
        held_run = int(deployment.xcom("air_trigger_timeout", timeout_run, "held", "run_id"))
        state = workspace_client.get_run(held_run)
        assert state.is_terminal and state.result_state == "CANCELED", state
        runs = deployment.worker_runs("air_trigger_timeout", timeout_run)
        assert runs[("held", -1)] == 2, runs  # the submit, then the __fail__ resume
        log = task_log_text(deployment, "air_trigger_timeout", timeout_run, "held")
        assert f"Cancelled run {held_run}: the deferral ended with" in log, log[-3000:]
        # The worker run that only cancelled left the run page its deferring part wrote.
        page = deployment.xcom("air_trigger_timeout", timeout_run, "held", "run_page_url")
        assert page.endswith(f"/jobs/runs/{held_run}"), page
        log = task_log_text(deployment, "air_trigger_timeout_planned", planned_timeout, "held")
        every, _ = workspace_client.list_runs(active_only=False, limit=25)
        planned_runs = [r for r in every if (r.run_name or "").startswith("held_planned--")]
        assert len(planned_runs) == 1, planned_runs
        state = workspace_client.get_run(planned_runs[0].run_id)
        assert state.is_terminal and state.result_state == "CANCELED", state
        assert f"Cancelled run {state.run_id}: the deferral ended with" in log, log[-3000:]
    finally:
        deployment.stop()


def test_sweep_capped_by_a_pool_sized_from_the_gpu_pool(tmp_path: Path, postgres: str) -> None:
    """dags/hyperparameter_sweep.py on a real scheduler: its Airflow pool sized from a GPU pool
    of one accelerator (one slot, deferred trials holding it) lets one trial run at a time;
    the recorded start and end of the trials never overlap."""
    import itertools
    import sys
    from datetime import datetime

    from airflow_deployment import REPO_ROOT
    from managed_process import own_database, run_command

    from air_runtime.local import start_local_workspace

    gpu_pool = {"pool_id": "team-a10", "accelerator_type": "GPU_1xA10", "accelerator_count": 1}
    workspace = start_local_workspace(data_dir=tmp_path / "workspace", gpu_pools=[gpu_pool])
    deployment = AirflowDeployment(
        tmp_path,
        executor="LocalExecutor",
        database_dsn=own_database(postgres, "airo_airflow_trigger_ends"),
        dag_folders={"project": REPO_ROOT / "dags"},
        parallelism=4,
    )
    try:
        deployment.migrate()
        deployment.start()
        add_airflow_connections(deployment, workspace)
        # Sized the documented way, by the command, with the deployment's database.
        size = ["gpu_sweep", "--gpu-pool", "team-a10", "--accelerators-per-trial", "1"]
        run_command(
            "size-pool",
            [sys.executable, "-m", "airflow_air.pools", *size],
            env={**deployment.env},
            log_dir=deployment.log_dir,
            timeout=120,
        )
        pool = deployment.api("GET", "/pools/gpu_sweep")
        assert (pool["slots"], pool["include_deferred"]) == (1, True), pool
        deployment.wait_for_dags(["hyperparameter_sweep"])
        run = deployment.trigger("hyperparameter_sweep")
        states = deployment.wait_for_runs([("hyperparameter_sweep", run)], timeout=420)
        assert states[("hyperparameter_sweep", run)]["state"] == "success", deployment.diagnose(
            [("hyperparameter_sweep", run)]
        )
        body = deployment.api(
            "GET", f"/dags/hyperparameter_sweep/dagRuns/{run}/taskInstances/trial/listMapped"
        )
        trials = sorted(
            (datetime.fromisoformat(t["start_date"]), datetime.fromisoformat(t["end_date"]))
            for t in body["task_instances"]
        )
        assert len(trials) == 4 and all(t["state"] == "success" for t in body["task_instances"])
        for (_, earlier_end), (later_start, _) in itertools.pairwise(trials):
            assert later_start >= earlier_end, trials
        best = deployment.xcom("hyperparameter_sweep", run, "pick_best", "return_value")
        assert best["best"]["learning_rate"] == "0.01", best
    finally:
        deployment.stop()
        workspace.stop()
