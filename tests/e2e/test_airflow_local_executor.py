"""Airflow 3 with the LocalExecutor on PostgreSQL: scheduler, triggerer, DAG processor and
API server as separate processes, driven only through the REST API. The connections are
stored in the metadata database through that API (no environment variables), so the workers
and the triggerer read them the way a production deployment does."""

from __future__ import annotations

from pathlib import Path

import pytest
from airflow_deployment import (
    E2E_DIR,
    REPO_ROOT,
    AirflowDeployment,
    DeferralObserver,
    add_airflow_connections,
    check_air_task_instances,
    remote_run_names,
    task_log_holding,
)
from managed_process import own_database

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(480)]

PARALLELISM = 4
FANOUT_DAG = "air_fanout_20"
FANOUT_WIDTH = 20


def test_rl_pipeline_and_twenty_deferred_runs(
    tmp_path: Path, postgres: str, local_workspace, workspace_client, rl_images
) -> None:
    deployment = AirflowDeployment(
        tmp_path,
        executor="LocalExecutor",
        database_dsn=own_database(postgres, "airo_airflow_local"),
        dag_folders={"project": REPO_ROOT / "dags", "e2e": E2E_DIR / "dags"},
        extra_env=rl_images["env"],
        parallelism=PARALLELISM,
    )
    try:
        deployment.migrate()
        deployment.start()
        add_airflow_connections(deployment, local_workspace)
        deployment.wait_for_dags(["rl_pipeline", FANOUT_DAG, "task_modules"])

        modules_run = deployment.trigger("task_modules")
        fanout_run = deployment.trigger(FANOUT_DAG)
        rl_run = deployment.trigger("rl_pipeline", rl_images["conf"])
        observer = DeferralObserver(deployment, FANOUT_DAG, fanout_run)
        states = deployment.wait_for_runs(
            [(FANOUT_DAG, fanout_run), ("rl_pipeline", rl_run), ("task_modules", modules_run)],
            timeout=300,
            on_poll=observer.poll,
        )
        final = {k: v["state"] for k, v in states.items()}
        assert set(final.values()) == {"success"}, deployment.diagnose(list(final))

        # The task process, forked from the scheduler, already held the submit path: the
        # provider's plugin loaded it there (airflow_air.plugin).
        held = deployment.xcom("task_modules", modules_run, "held_at_start", "return_value")
        assert held == {"airflow_air._task_run": True, "air_runtime.plan": True}, held

        # More runs waited at once than the executor has slots: the triggerer held them.
        assert observer.max_deferred > PARALLELISM, vars(observer)
        assert observer.max_running <= PARALLELISM, vars(observer)
        assert observer.trigger_classpaths == {"airflow_air.triggers.AirRunTrigger"}
        triggerers = deployment.api("GET", "/jobs", params={"job_type": "TriggererJob"})["jobs"]
        assert observer.triggerer_ids, "no deferred task was ever claimed by a triggerer"
        assert observer.triggerer_ids <= {j["id"] for j in triggerers}, vars(observer)
        assert len(observer.deferred_task_ids) == FANOUT_WIDTH, vars(observer)

        fanout_remote = check_air_task_instances(
            deployment, FANOUT_DAG, fanout_run, workspace_client
        )
        assert len(fanout_remote) == FANOUT_WIDTH
        assert len(set(fanout_remote.values())) == FANOUT_WIDTH  # one remote run per task
        # The node's lines reached the task log of a run waited on in the triggerer.
        done = "node 0 attempt 0] fan-out run 3 done"
        fanout_log = task_log_holding(deployment, FANOUT_DAG, fanout_run, "run_03", done)
        assert done in fanout_log, fanout_log[-3000:]

        rl_remote = check_air_task_instances(deployment, "rl_pipeline", rl_run, workspace_client)
        assert rl_remote, "rl_pipeline pushed no AI Runtime run id"
        for remote_id in set(rl_remote.values()):
            run = workspace_client.get_run(remote_id)
            assert run.is_success and run.tasks, run
            assert all(t.result_state == "SUCCESS" for t in run.tasks), run

        # Exactly one remote run per logical submission.
        names = remote_run_names(workspace_client)
        # A run is named after its workflow, then its Dag and submit task.
        assert sum(c for k, c in names.items() if k.startswith("rl_pipeline--")) == 1, names
        assert sum(c for k, c in names.items() if k.startswith(f"{FANOUT_DAG}_")) == FANOUT_WIDTH, (
            names
        )
    finally:
        deployment.stop()
