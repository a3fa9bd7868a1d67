"""What a waiting step records, and when: a step whose Dagster run ended while it waited (its
run worker died, and Dagster failed the run) stops and records nothing, so whoever continues
the run adopts the remote run and records it (a training materialized, and its GPU-hours
counted, once); a step records the MLflow run as soon as the run has one, while it trains."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import dagster as dg
import pytest
from dagster_checks import counters, failure_data, workload

from air_runtime import AirClient
from dagster_air import AirStage, build_air_assets


def _held(name: str, tmp_path: Path) -> dict[str, object]:
    return workload(
        name,
        f'echo started >> "{tmp_path}/trained"\n'
        f'while [ ! -e "{tmp_path}/release" ]; do sleep 0.2; done\n',
    )


def _wait_for(predicate, what: str, timeout: float = 90):
    deadline = time.monotonic() + timeout
    while not (found := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)
    return found


# Were the step to go on waiting, it would wait for a training held until after it returns.
@pytest.mark.timeout(180)
def test_a_step_whose_dagster_run_failed_stops_without_recording(
    air_workspace, instance, local_workspace, tmp_path
):
    assets = build_air_assets(AirStage(key="orphaned", workload=_held("orphaned", tmp_path)))
    marked: list[str] = []

    def fail_the_run_once_training() -> None:
        # What the code server does when it sees the run worker die: the run is failed.
        _wait_for((tmp_path / "trained").exists, "the training to start")
        (run,) = instance.get_runs()
        instance.report_run_failed(run, message="run worker exited unexpectedly (SIGKILL)")
        marked.append(run.run_id)

    marker = threading.Thread(target=fail_the_run_once_training)
    marker.start()
    try:
        result = dg.materialize(
            [assets],
            resources={"air_workspace": air_workspace},
            instance=instance,
            raise_on_error=False,
        )
    finally:
        marker.join()
    assert marked == [result.run_id]
    assert not result.success
    description = failure_data(result).user_failure_data.description
    assert f"Dagster run {result.run_id} ended (FAILURE)" in description
    # Nothing recorded: no materialization, no observation (an observation of the remote run's
    # end would make a retry start a new remote run instead of adopting this one).
    assert result.asset_materializations_for_node("orphaned") == []
    observed = [
        e for e in instance.all_logs(result.run_id) if e.dagster_event_type == "ASSET_OBSERVATION"
    ]
    assert observed == []
    # The remote run is left to whoever continues the Dagster run: still training, not cancelled.
    assert counters(local_workspace)["runs_created"] == 1
    with AirClient(local_workspace.host, local_workspace.token) as client:
        (running,), _ = client.list_runs(active_only=True)
        assert running.life_cycle_state == "RUNNING"
        (tmp_path / "release").touch()
        ended = client.wait(running.run_id, poll_interval=0.2, timeout=60)
    assert ended.is_success
    assert (tmp_path / "trained").read_text().split() == ["started"]


@pytest.mark.timeout(180)
def test_the_mlflow_link_is_recorded_while_the_run_trains(
    air_workspace, instance, local_workspace, tmp_path
):
    assets = build_air_assets(AirStage(key="linked", workload=_held("linked", tmp_path)))
    seen: list[tuple[str, str]] = []

    def release_once_linked() -> None:
        def link() -> str | None:
            for run in instance.get_runs():
                for event in instance.all_logs(run.run_id):
                    if event.dagster_event_type != "ASSET_OBSERVATION":
                        continue
                    observation = event.dagster_event.event_specific_data.asset_observation
                    value = observation.metadata.get("dagster-air/mlflow_run")
                    if value is not None:
                        return str(value.value)
            return None

        try:
            url = _wait_for(link, "the MLflow link")
            with AirClient(local_workspace.host, local_workspace.token) as client:
                (running,), _ = client.list_runs(active_only=True)
                seen.append((url, running.life_cycle_state))
        finally:
            (tmp_path / "release").touch()

    watcher = threading.Thread(target=release_once_linked)
    watcher.start()
    try:
        result = dg.materialize(
            [assets], resources={"air_workspace": air_workspace}, instance=instance
        )
    finally:
        watcher.join()
    ((url, state),) = seen
    assert state == "RUNNING"  # recorded while the run trained, not at its end
    (mat,) = result.asset_materializations_for_node("linked")
    assert mat.metadata["dagster-air/mlflow_run"].value == url  # the same run at the end
