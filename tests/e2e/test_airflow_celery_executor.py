"""Airflow 3 with the CeleryExecutor: Redis broker, PostgreSQL metadata and result backend,
two Celery workers, plus scheduler, triggerer, DAG processor and API server."""

from __future__ import annotations

from pathlib import Path

import pytest
from airflow_deployment import (
    E2E_DIR,
    REPO_ROOT,
    AirflowDeployment,
    DeferralObserver,
    airflow_connection_env,
    check_air_task_instances,
    remote_run_names,
)
from managed_process import free_port, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(480)]

FANOUT_DAG = "air_fanout_6"
WORKER_CONCURRENCY = 2
# A Redis database of its own, emptied first: no message of an earlier run is replayed.
REDIS_DB = 5


def test_rl_pipeline_on_two_celery_workers(
    tmp_path: Path, postgres: str, redis_url: str, local_workspace, workspace_client, rl_images
) -> None:
    import redis

    redis.Redis.from_url(f"{redis_url}/{REDIS_DB}").flushdb()
    database = f"{postgres}/airo_airflow_celery"
    deployment = AirflowDeployment(
        tmp_path,
        executor="CeleryExecutor",
        database_dsn=database,
        dag_folders={"project": REPO_ROOT / "dags", "e2e": E2E_DIR / "dags"},
        extra_env={
            **airflow_connection_env(local_workspace),
            **rl_images["env"],
            "AIRFLOW__CELERY__BROKER_URL": f"{redis_url}/{REDIS_DB}",
            "AIRFLOW__CELERY__RESULT_BACKEND": f"db+{database}",
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(WORKER_CONCURRENCY),
        },
        parallelism=2 * WORKER_CONCURRENCY,
    )
    workers = [
        (
            name,
            [
                "celery",
                "worker",
                "--concurrency",
                str(WORKER_CONCURRENCY),
                "--celery-hostname",
                f"{name}@%h",
                "--without-mingle",
                "--without-gossip",
            ],
            # Each worker serves its task logs on a port of its own.
            {"AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port())},
        )
        for name in ("worker1", "worker2")
    ]
    try:
        deployment.migrate()
        deployment.start(extra_services=workers)
        worker_procs = [p for p in deployment.processes if p.name.startswith("worker")]
        wait_for(
            lambda: all("ready." in p.tail(200) for p in worker_procs),
            timeout=120,
            what="both Celery workers ready",
            processes=deployment.processes,
        )
        deployment.wait_for_dags(["rl_pipeline", FANOUT_DAG])

        rl_run = deployment.trigger("rl_pipeline", rl_images["conf"])
        fanout_run = deployment.trigger(FANOUT_DAG)
        observer = DeferralObserver(deployment, FANOUT_DAG, fanout_run)
        states = deployment.wait_for_runs(
            [("rl_pipeline", rl_run), (FANOUT_DAG, fanout_run)], timeout=300, on_poll=observer.poll
        )
        final = {k: v["state"] for k, v in states.items()}
        assert set(final.values()) == {"success"}, deployment.diagnose(list(final))

        rl_remote = check_air_task_instances(deployment, "rl_pipeline", rl_run, workspace_client)
        assert rl_remote, "rl_pipeline pushed no AI Runtime run id"
        fanout_remote = check_air_task_instances(
            deployment, FANOUT_DAG, fanout_run, workspace_client
        )
        assert len(set(fanout_remote.values())) == 6
        assert observer.max_deferred >= 1, vars(observer)
        assert observer.trigger_classpaths == {"airflow_air.triggers.AirRunTrigger"}

        # Both workers took tasks from the queue.
        for proc in worker_procs:
            assert "air_fanout_6" in proc.tail(5000) or "rl_pipeline" in proc.tail(5000), (
                f"{proc.name} ran no task\n{proc.tail()}"
            )

        # Exactly one remote run per logical submission.
        names = remote_run_names(workspace_client)
        # A run is named after its workflow, then its Dag and submit task.
        assert sum(c for k, c in names.items() if k.startswith("rl_pipeline--")) == 1, names
        assert sum(c for k, c in names.items() if k.startswith(f"{FANOUT_DAG}_")) == 6, names
    finally:
        deployment.stop()
