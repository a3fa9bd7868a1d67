"""Run termination cancels the remote run; a crashed step reattaches instead of starting a
second remote run; a retry after a failed remote run starts a new one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import psutil
import pytest
from dagster_checks import counters, workload

from air_runtime import AirClient, RunState
from dagster_air import AirStage, build_air_assets

REMOTE_JOBS = Path(__file__).with_name("remote_jobs.py")


def _start_job(local_workspace, dagster_home, executor, command, retries=0):
    env = {
        **os.environ,
        "DAGSTER_HOME": str(dagster_home),
        "AIRO_HOST": local_workspace.host,
        "AIRO_TOKEN": local_workspace.token,
        "AIR_TEST_COMMAND": command,
        "AIR_TEST_RETRIES": str(retries),
    }
    return subprocess.Popen(
        [sys.executable, str(REMOTE_JOBS), executor],
        env=env,
        cwd=REMOTE_JOBS.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _running_run(client) -> RunState | None:
    runs, _ = client.list_runs(active_only=True)
    running = [r for r in runs if r.life_cycle_state == "RUNNING"]
    return running[0] if running else None


def _finish(proc, timeout=120):
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        output, _ = proc.communicate()
        raise AssertionError(f"the job process did not end:\n{output[-4000:]}") from None
    return output


@pytest.mark.parametrize("executor", ["in_process", "multiprocess"])
def test_terminating_the_dagster_run_cancels_the_remote_run(
    executor, local_workspace, dagster_home, instance
):
    proc = _start_job(local_workspace, dagster_home, executor, "echo started\nsleep 300\n")
    try:
        with AirClient(local_workspace.host, local_workspace.token) as client:
            run = _wait_for(lambda: _running_run(client), 90, "the remote run to start")
            # What a run launcher does to terminate a run: interrupt the run worker.
            proc.send_signal(signal.SIGINT)
            interrupted_at = time.monotonic()
            output = _finish(proc)
            state = _wait_for(
                lambda: (s := client.get_run(run.run_id)).is_terminal and s, 30, "the cancel"
            )
            assert state.result_state == "CANCELED", output[-3000:]
            assert time.monotonic() - interrupted_at < 30
    finally:
        if proc.poll() is None:
            proc.kill()
    (dagster_run,) = instance.get_runs()
    assert dagster_run.status in (dg.DagsterRunStatus.CANCELED, dg.DagsterRunStatus.FAILURE)
    messages = [e.user_message for e in instance.all_logs(dagster_run.run_id)]
    assert any(f"cancelling run {run.run_id}" in m for m in messages)
    assert any(f"run {run.run_id} ended TERMINATED/CANCELED" in m for m in messages)
    assert counters(local_workspace)["runs_created"] == 1


def _step_pid(proc) -> int | None:
    """The multiprocess executor's step process (a `multiprocessing` spawn child)."""
    for child in psutil.Process(proc.pid).children(recursive=True):
        try:
            if any("spawn_main" in part for part in child.cmdline()):
                return child.pid
        except psutil.NoSuchProcess:
            continue
    return None


def test_a_crashed_step_retries_and_reattaches_to_the_run_it_started(
    local_workspace, dagster_home, instance, tmp_path
):
    # The run goes on until the file exists: the step dies while it waits, on any machine.
    release = tmp_path / "release"
    proc = _start_job(
        local_workspace,
        dagster_home,
        "multiprocess",
        f"echo started\nwhile [ ! -e {release} ]; do sleep 0.1; done\necho finished\n",
        retries=1,
    )
    try:
        with AirClient(local_workspace.host, local_workspace.token) as client:
            run = _wait_for(lambda: _running_run(client), 90, "the remote run to start")
            pid = _wait_for(lambda: _step_pid(proc), 30, "the step process id")
            os.kill(pid, signal.SIGKILL)  # the step's worker dies while waiting
            assert client.get_run(run.run_id).life_cycle_state == "RUNNING"
            release.touch()  # only now can the run end, and the retry find it
            output = _finish(proc)
        assert proc.returncode == 0, output[-4000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    (dagster_run,) = instance.get_runs()
    assert dagster_run.status == dg.DagsterRunStatus.SUCCESS
    retries = instance.all_logs(dagster_run.run_id, of_type=dg.DagsterEventType.STEP_UP_FOR_RETRY)
    assert len(retries) == 1  # the crash really made Dagster retry the step
    (mat,) = instance.all_logs(
        dagster_run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
    )
    metadata = mat.dagster_event.event_specific_data.materialization.metadata
    assert metadata["dagster-air/run_id"].value == run.run_id
    seen = counters(local_workspace)
    assert seen["runs_created"] == 1
    assert list(seen["submits_per_token"].values()) == [2]  # resubmitted, same token, same run


def test_a_retry_after_a_failed_remote_run_starts_a_new_one(
    air_workspace, instance, local_workspace, tmp_path
):
    marker = tmp_path / "failed-once"
    command = f'if [ -f "{marker}" ]; then echo second try; else touch "{marker}"; exit 1; fi\n'
    assets = build_air_assets(
        AirStage(key="flaky", workload=workload("flaky", command)),
        retry_policy=dg.RetryPolicy(max_retries=1),
    )
    result = dg.materialize([assets], resources={"air_workspace": air_workspace}, instance=instance)
    assert result.success
    seen = counters(local_workspace)
    assert seen["runs_created"] == 2
    assert sorted(seen["submits_per_token"].values()) == [1, 1]
    # The generation observation (attempt ends are observations too, without a generation).
    (observation,) = [
        e
        for e in result.all_events
        if e.event_type == dg.DagsterEventType.ASSET_OBSERVATION
        and "dagster-air/generation" in e.event_specific_data.asset_observation.metadata
    ]
    first = observation.event_specific_data.asset_observation.metadata
    assert first["dagster-air/final_state"].value == "FAILED"
    assert first["dagster-air/generation"].value == 0
    (mat,) = result.asset_materializations_for_node("flaky")
    assert mat.metadata["dagster-air/run_id"].value != first["dagster-air/run_id"].value


def test_each_materialization_starts_its_own_remote_run(air_workspace, instance, local_workspace):
    assets = build_air_assets(AirStage(key="again", workload=workload("again", "true")))
    run_ids = set()
    for _ in range(2):
        result = dg.materialize(
            [assets], resources={"air_workspace": air_workspace}, instance=instance
        )
        (mat,) = result.asset_materializations_for_node("again")
        run_ids.add(mat.metadata["dagster-air/run_id"].value)
    assert len(run_ids) == 2
    assert counters(local_workspace)["runs_created"] == 2
