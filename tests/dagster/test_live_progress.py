"""A Dagster step waiting on a run logs its training progress and time left when they change
(read from what the rank logs to MLflow, as ``databricks air get`` computes them) and records
each change as an observation of the asset."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import dagster as dg
import pytest
from dagster_checks import workload
from mlflow_ranks import progress_command

from dagster_air import AirStage, build_air_assets


def _progress_observations(instance: dg.DagsterInstance) -> list[dict]:
    records = instance.fetch_observations(dg.AssetKey("trainer"), limit=50).records
    return [
        {k: v.value for k, v in r.asset_observation.metadata.items()}
        for r in records
        if r.asset_observation is not None
        and "dagster-air/progress_percent" in r.asset_observation.metadata
    ]


def test_a_waiting_step_logs_and_records_the_run_s_progress(
    air_workspace, instance, tmp_path: Path
):
    pytest.importorskip("mlflow")
    release = tmp_path / "release"
    assets = build_air_assets(
        AirStage(key="trainer", workload=workload("trainer", progress_command(release)))
    )
    workspace = air_workspace.model_copy(update={"progress_interval": 0.3})
    outcome: dict = {}

    def materialize() -> None:
        outcome["result"] = dg.materialize(
            [assets], resources={"air_workspace": workspace}, instance=instance
        )

    worker = threading.Thread(target=materialize)
    worker.start()
    try:
        deadline = time.monotonic() + 120
        while not _progress_observations(instance):
            assert worker.is_alive(), "the step ended before any progress was recorded"
            assert time.monotonic() < deadline, "no progress observation"
            time.sleep(0.2)
    finally:
        release.touch()
        worker.join(timeout=120)
    result = outcome["result"]
    assert result.success
    (observed,) = _progress_observations(instance)  # one change: one observation
    assert (observed["dagster-air/progress_percent"], observed["dagster-air/remaining_s"]) == (
        10,
        90,
    )
    run_id = observed["dagster-air/run_id"]
    messages = [e.user_message for e in instance.all_logs(result.run_id)]
    assert sum(f"run {run_id}: training 10% · ~2m left" in m for m in messages) == 1, messages
