"""A hyperparameter sweep on Databricks AI Runtime, capped to the team's GPU pool.

- ``trial`` is one ``AirRunOperator`` mapped over four learning rates
  (``.partial().expand(overrides=...)``): four AI Runtime runs, each in the GPU pool named by
  the ``gpu_pool`` param (``compute.pool_id``), each with its MLflow run and GPU-hours.
- The sweep never asks for more GPUs than the pool reserves: the trials take slots of the
  Airflow pool ``gpu_sweep``, sized from the GPU pool by ``airflow_air.pools`` (one slot per
  trial it can hold; deferred trials keep their slot), and at most two trials of one Dag run
  are active at a time (``max_active_tis_per_dagrun``, deferred tasks count).
- ``pick_best`` collects every trial's result (MLflow run, GPU-hours) and the objective the
  trial printed, and returns the best trial.

Before the first run, size the Airflow pool where the metadata database is reachable::

    python -m airflow_air.pools gpu_sweep --gpu-pool team-a10 --accelerators-per-trial 1
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import DAG, task
from airflow_air.operators import AirRunOperator

LEARNING_RATES = ("0.1", "0.03", "0.01", "0.003")
AIRFLOW_POOL = "gpu_sweep"

with DAG(
    dag_id="hyperparameter_sweep",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"gpu_pool": "team-a10"},
    tags=["ai-runtime", "sweep"],
) as dag:
    trials = AirRunOperator.partial(
        task_id="trial",
        workload="workloads/sweep_trial.yaml",
        pool=AIRFLOW_POOL,
        max_active_tis_per_dagrun=2,
        deferrable=True,
    ).expand(overrides=[{"env_variables.LEARNING_RATE": lr} for lr in LEARNING_RATES])

    @task
    def pick_best(results: list[dict[str, Any]]) -> dict[str, Any]:
        """Rank the trials by the objective each printed (lower is better)."""
        from airflow_air.hooks import AirHook

        ranked = []
        with AirHook().get_client() as client:
            for index, result in enumerate(results):
                objective = None
                for record in client.iter_run_logs(result["run_id"]):
                    for line in record.body.splitlines():
                        if line.startswith("objective="):
                            objective = float(line.removeprefix("objective="))
                ranked.append(
                    {
                        "trial": index,
                        "learning_rate": LEARNING_RATES[index],
                        "objective": objective,
                        "run_id": result["run_id"],
                        "mlflow_run_id": result["mlflow_run_id"],
                        "gpu_hours": result["gpu_hours"],
                    }
                )
        scored = [trial for trial in ranked if trial["objective"] is not None]
        if not scored:
            raise ValueError("no trial printed an objective")
        best = min(scored, key=lambda trial: trial["objective"])
        return {
            "best": best,
            "trials": ranked,
            "gpu_hours": round(sum(trial["gpu_hours"] or 0.0 for trial in ranked), 6),
        }

    pick_best(trials.output)
