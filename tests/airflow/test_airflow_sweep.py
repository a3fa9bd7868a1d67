"""The capped hyperparameter sweep of dags/ (``hyperparameter_sweep``) against a local
workspace serving a GPU pool: the Airflow pool sized from it, four trials in the pool, and the
downstream task that picks the best trial from their MLflow runs, GPU-hours and objectives."""

from __future__ import annotations

import json

import httpx
import pytest
from airflow_runs import repo_dag, task_states, xcom

from air_runtime import AirClient, GpuPool

GPU_POOL = {"pool_id": "team-a10", "accelerator_type": "GPU_1xA10", "accelerator_count": 2}


@pytest.fixture
def pool_workspace(tmp_path, airflow_db, monkeypatch):
    from air_runtime.local import start_local_workspace

    ws = start_local_workspace(data_dir=tmp_path / "workspace", gpu_pools=[GPU_POOL])
    connection = {"conn_type": "databricks", "host": ws.host, "password": ws.token}
    monkeypatch.setenv("AIRFLOW_CONN_DATABRICKS_DEFAULT", json.dumps(connection))
    try:
        yield ws
    finally:
        ws.stop()


def test_trial_slots_are_the_trials_a_reservation_holds():
    from airflow_air.pools import trial_slots

    pool = GpuPool("team-h100", "GPU_8xH100", 64)
    assert trial_slots(pool, 8) == 8
    assert trial_slots(pool, 24) == 2  # whole trials only
    with pytest.raises(ValueError, match="fewer than one trial's 128"):
        trial_slots(pool, 128)
    with pytest.raises(ValueError, match="at least 1"):
        trial_slots(pool, 0)


def test_capped_sweep_runs_every_trial_in_the_pool_and_picks_the_best(pool_workspace, capsys):
    from airflow.models.pool import Pool
    from airflow.utils.session import create_session
    from airflow_air.pools import main

    # The Airflow pool from the GPU pool, the way a deployment's setup sizes it.
    assert main(["gpu_sweep", "--gpu-pool", "team-a10", "--accelerators-per-trial", "1"]) == 0
    assert "Airflow pool gpu_sweep: 2 slots" in capsys.readouterr().out
    with create_session() as session:
        pool = session.query(Pool).filter(Pool.pool == "gpu_sweep").one()
        assert (pool.slots, pool.include_deferred) == (2, True)
        assert "team-a10" in pool.description

    dag = repo_dag("hyperparameter_sweep.py")
    trial = dag.get_task("trial")
    assert trial.partial_kwargs["pool"] == "gpu_sweep"
    assert trial.partial_kwargs["max_active_tis_per_dagrun"] == 2
    dag_run = dag.test()
    assert task_states(dag_run) == {"trial": "success", "pick_best": "success"}

    summary = xcom(dag.dag_id, dag_run.run_id, "pick_best")
    trials = summary["trials"]
    assert [t["learning_rate"] for t in trials] == ["0.1", "0.03", "0.01", "0.003"]
    assert summary["best"]["learning_rate"] == "0.01", summary
    assert summary["best"]["objective"] == pytest.approx(0.05)
    assert all(t["mlflow_run_id"] and t["gpu_hours"] > 0 for t in trials), trials
    assert summary["gpu_hours"] == pytest.approx(sum(t["gpu_hours"] for t in trials), abs=1e-5)
    with AirClient(pool_workspace.host, pool_workspace.token) as client:
        runs = [client.get_run(t["run_id"]) for t in trials]
    assert len({r.run_id for r in runs}) == 4
    assert all(r.is_success for r in runs), runs
    # Each trial ran in the GPU pool (compute.pool_id, sent as provisioned_capacity_id).
    for run in runs:
        body = httpx.get(
            f"{pool_workspace.host}/api/2.2/jobs/runs/get",
            params={"run_id": run.run_id},
            headers={"Authorization": f"Bearer {pool_workspace.token}"},
        ).json()
        assert '"provisioned_capacity_id": "team-a10"' in json.dumps(body), body


def test_sizing_names_the_problem(pool_workspace, capsys):
    from airflow_air.pools import main

    assert main(["gpu_sweep", "--gpu-pool", "team-a10", "--accelerators-per-trial", "4"]) == 2
    assert "reserves 2 GPU_1xA10 accelerators, fewer than one trial's 4" in capsys.readouterr().err
    assert main(["gpu_sweep", "--gpu-pool", "no-such-pool", "--accelerators-per-trial", "1"]) == 2
    assert "no-such-pool" in capsys.readouterr().err
