"""Each deferred task's log holds its own run's lines, and no other task's, live while the run
runs and the rest at its end, each line once, on a real
deployment (scheduler, triggerer, dag-processor, api-server; LocalExecutor, PostgreSQL).

Two Dags, six deferred tasks waiting at once on runs that end differently (success, failure,
a wait for GPU capacity, two stages of one workflow run), all served by the triggerer's one
shared run watcher; the triggerer is restarted while they wait. Each task's log is read through
Airflow's log API, as the UI reads it, and checked by run id: every run id a log names is its
own run's."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from airflow_deployment import E2E_DIR, AirflowDeployment, add_airflow_connections
from managed_process import own_database

from air_runtime.local import start_local_workspace

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

POOL = {"pool_id": "pool-log-routing", "accelerator_type": "GPU_1xA10", "accelerator_count": 1}
TEAM_A = ("air_logs_team_a", ("a_ok", "a_fails", "a_pool"))
TEAM_B = ("air_logs_team_b", ("b_pool", "b_flow.left", "b_flow.right"))
# "Run 1003: ...", "run 1003", "airo logs 1003": every way a line names a run.
RUN_MENTION = re.compile(r"\b(?:[Rr]un|logs) (\d+)\b")


def api_log_text(deployment: AirflowDeployment, dag_id: str, run_id: str, task_id: str) -> str:
    """Every try's log of a task instance as Airflow's log API serves it to the UI."""
    ti = deployment.task_instance(dag_id, run_id, task_id)
    texts = []
    for try_number in range(1, int(ti["try_number"]) + 1):
        body: dict[str, Any] = deployment.api(
            "GET",
            f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}",
            params={"full_content": "true"},
        )
        for entry in body["content"]:
            texts.append(str(entry.get("event", "")) if isinstance(entry, dict) else str(entry))
    return "\n".join(texts)


def _all_deferred(deployment: AirflowDeployment, runs: dict[str, str]) -> bool:
    deferred = 0
    for dag_id, tasks in (TEAM_A, TEAM_B):
        states = {t["task_id"]: t["state"] for t in deployment.task_instances(dag_id, runs[dag_id])}
        deferred += sum(states.get(task) == "deferred" for task in tasks)
    return deferred == 6


def test_each_deferred_task_log_holds_only_its_own_run(tmp_path: Path, postgres: str) -> None:
    workspace = start_local_workspace(data_dir=tmp_path / "workspace", gpu_pools=[POOL])
    deployment = AirflowDeployment(
        tmp_path,
        executor="LocalExecutor",
        database_dsn=own_database(postgres, "airo_airflow_log_routing"),
        dag_folders={"e2e": E2E_DIR / "dags"},
        parallelism=8,
        # Live lines read every 2 s, so a 40 s run shows its first line long before its end.
        extra_env={"AIRFLOW__AIR__LIVE_LINES_INTERVAL": "2"},
    )
    try:
        deployment.migrate()
        deployment.start()
        add_airflow_connections(deployment, workspace)
        deployment.wait_for_dags([TEAM_A[0], TEAM_B[0]])
        release = tmp_path / "release-the-pool"
        conf = {"release": str(release)}
        runs = {dag_id: deployment.trigger(dag_id, conf) for dag_id, _ in (TEAM_A, TEAM_B)}

        # All six wait in the triggerer at once; then the triggerer restarts under them.
        deadline = time.monotonic() + 240
        while not _all_deferred(deployment, runs):
            if time.monotonic() > deadline:
                pytest.fail(f"the six tasks never all deferred\n{deployment.logs()}")
            time.sleep(0.5)
        deployment.restart("triggerer", hard=False)

        # One pool run holds the pool's accelerator until released; the other waits for it,
        # and its task's log says so. Live: the holder's first line is in its task's log while
        # it runs.
        from air_runtime import AirClient

        pool_tasks = {TEAM_A[0]: "a_pool", TEAM_B[0]: "b_pool"}

        def pool_logs() -> dict[str, str]:
            try:
                return {
                    task_id: api_log_text(deployment, dag_id, runs[dag_id], task_id)
                    for dag_id, task_id in pool_tasks.items()
                }
            except AssertionError as error:  # the API server answered 500 under load
                print(f"asking again after: {error}")
                return {}

        deadline = time.monotonic() + 240
        while True:
            logs_now = pool_logs()
            waiting = [t for t, log in logs_now.items() if "[waiting for GPU capacity]" in log]
            holding = [t for t, log in logs_now.items() if f"start of {t}" in log]
            if waiting and holding:
                break
            if time.monotonic() > deadline:
                pytest.fail(f"no capacity wait and live line seen: {logs_now}\n{deployment.logs()}")
            time.sleep(1)
        assert waiting != holding, (waiting, holding)
        (holder,) = holding
        holder_dag = next(d for d, t in pool_tasks.items() if t == holder)
        with AirClient(workspace.host, workspace.token) as client:
            run_id = int(deployment.xcom(holder_dag, runs[holder_dag], holder, "run_id"))
            assert client.get_run(run_id).life_cycle_state == "RUNNING"  # shown while running
        release.touch()

        states = deployment.wait_for_runs([(d, r) for d, r in runs.items()], timeout=420)
        assert {s["state"] for s in states.values()} == {"failed"}, states  # each has a failure

        remote: dict[tuple[str, str], int] = {}
        for dag_id, tasks in (TEAM_A, TEAM_B):
            for task_id in tasks:
                ti = deployment.task_instance(dag_id, runs[dag_id], task_id)
                expected = "failed" if task_id in ("a_fails", "b_flow.right") else "success"
                assert ti["state"] == expected, (task_id, ti)
                # A stage waits on its workflow's run, whose id the group's submit task left.
                holder = "b_flow.submit" if task_id.startswith("b_flow.") else task_id
                remote[(dag_id, task_id)] = int(
                    deployment.xcom(dag_id, runs[dag_id], holder, "run_id")
                )

        logs = {key: api_log_text(deployment, key[0], runs[key[0]], key[1]) for key in remote}
        for key, log in logs.items():
            own = remote[key]
            named = {int(n) for n in RUN_MENTION.findall(log)}
            assert named == {own}, f"{key} (run {own}) names runs {sorted(named)}:\n{log[-4000:]}"
            # Its own run's ending, in its own log.
            task_id = key[1]
            name = task_id.rsplit(".", 1)[-1]
            # Its own run's lines, each once (shown live or copied at the end, not both).
            assert log.count(f"start of {name}") == 1, f"{key}:\n{log[-4000:]}"
            assert log.count(f"end of {name}") == 1, f"{key}:\n{log[-4000:]}"
            if "." in task_id:  # a stage: its own stage's lines, not its sibling's
                sibling = "right" if name == "left" else "left"
                assert f"of {sibling}" not in log and f"stage {sibling}" not in log, log[-4000:]
            else:
                assert f"Run {own}: " in log, f"{key}: no state line\n{log[-4000:]}"
        # The failures' errors are in the failed tasks' logs only.
        assert "exit code 3" in logs[(TEAM_A[0], "a_fails")]
        assert sum("exit code 3" in log for log in logs.values()) == 1
        # The pool run that waited for the pool's one accelerator said so in its own log only.
        capacity = [key[1] for key, log in logs.items() if "[waiting for GPU capacity]" in log]
        assert capacity == waiting, (capacity, waiting)
        # Copied node lines carry the time they were printed: 15 s apart, not one instant.
        stamps = re.findall(
            r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z \[a_ok node 0 attempt 0\] (start|end) of",
            logs[(TEAM_A[0], "a_ok")],
        )
        assert [what for _, what in stamps] == ["start", "end"], stamps
        from datetime import datetime

        start, end = (datetime.fromisoformat(stamp) for stamp, _ in stamps)
        assert (end - start).total_seconds() >= 14, stamps
    finally:
        deployment.stop()
        workspace.stop()
