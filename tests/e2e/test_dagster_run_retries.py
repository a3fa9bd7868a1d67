"""Run workers SIGKILLed while their steps wait on GPU runs, on a real deployment (webserver
and daemon on PostgreSQL, run monitoring and run retries on, Dagster's default multiprocess
executor). Three trials at once: Dagster fails each run (its code server sees the worker die;
run monitoring would, past ``dagster/max_runtime``), the retries daemon retries it, and the
retry adopts the GPU run its parent started. The killed worker's step subprocess outlives it
(re-parented to PID 1): it sees its run failed, stops and records nothing. Per trial: one
GPU run, one training, one materialization, its GPU-hours recorded once."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import psutil
import pytest
from dagster_deployment import DagsterDeployment
from managed_process import own_database

from air_runtime import AirClient

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

DEFINITIONS = Path(__file__).with_name("dagster_recovery") / "definitions.py"
LOCATION = "air_recovery"
MAX_RUNTIME_S = 20  # how long a run may live before run monitoring fails it
TRIALS = 3
WORKER_PID = re.compile(
    r"Executing steps using multiprocess executor: parent process \(pid: (\d+)\)"
)
GPU_HOURS = "dagster-air/gpu_hours"


def _wait(what: str, check, deployment: DagsterDeployment, timeout: float = 180):
    """Wait for the event ``check`` reports (its truthy value), failing with the services'
    logs if a service dies or it never comes."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline or not all(p.alive for p in deployment.processes):
            pytest.fail(f"no {what}\n{deployment.logs()}")
        time.sleep(0.5)


def _step_processes(worker_pid: int) -> list[psutil.Process]:
    """The run worker's step subprocesses (spawned by the multiprocess executor)."""
    return [
        child
        for child in psutil.Process(worker_pid).children()
        if "spawn_main" in " ".join(child.cmdline())
    ]


def _gone(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_killed_run_workers_retries_adopt_their_gpu_runs_recorded_once(
    tmp_path: Path, postgres: str, local_workspace
):
    count_dir = tmp_path / "count"
    count_dir.mkdir()
    deployment = DagsterDeployment(
        tmp_path,
        database_dsn=own_database(postgres, "airo_dagster_run_retries"),
        code_location={
            "python_file": {
                "relative_path": str(DEFINITIONS),
                "working_directory": str(DEFINITIONS.parent),
                "location_name": LOCATION,
            }
        },
        extra_env={
            "AIRO_HOST": local_workspace.host,
            "AIRO_TOKEN": local_workspace.token,
            "COUNT_DIR": str(count_dir),
            "MAX_RUNTIME": str(MAX_RUNTIME_S),
        },
        instance_settings={
            "run_coordinator": {
                "module": "dagster._core.run_coordinator",
                "class": "QueuedRunCoordinator",
                "config": {"max_concurrent_runs": 2 * TRIALS},  # the trials and their retries
            },
            "run_monitoring": {"enabled": True, "poll_interval_seconds": 1},
            "run_retries": {"enabled": True},
        },
    )
    try:
        deployment.start()
        parents = [deployment.launch(location=LOCATION, job="held_job") for _ in range(TRIALS)]

        orphans: dict[str, list[psutil.Process]] = {}
        for parent in parents:
            # The rank started and the step recorded its GPU run: the step waits on it.
            _wait("training", (count_dir / f"trained_{parent}").exists, deployment)
            _wait(
                "launch", lambda p=parent: "submitted run" in deployment.run_messages(p, 300),
                deployment,
            )  # fmt: skip
            found = _wait(
                "run worker pid",
                lambda p=parent: WORKER_PID.search(deployment.run_messages(p, 300)),
                deployment,
            )
            worker = int(found.group(1))
            orphans[parent] = _step_processes(worker)
            assert len(orphans[parent]) == 1, orphans[parent]
            os.kill(worker, signal.SIGKILL)

        retries = {}
        for parent in parents:
            status, _ = deployment.wait_for_run(parent, timeout=MAX_RUNTIME_S + 120)
            assert status == "FAILURE"
            # Dagster's code server saw its run worker die (run monitoring's max runtime is
            # the backstop where no process watches the worker).
            assert "SIGKILL" in deployment.run_messages(parent, 300)
            # The orphaned step stops on its own, while its GPU run still trains.
            (orphan,) = orphans[parent]
            _wait("the orphaned step to stop", lambda o=orphan: _gone(o), deployment)
            assert f"Dagster run {parent} ended (FAILURE)" in deployment.run_messages(parent, 300)
            (retries[parent],) = _wait(
                "run retry", lambda p=parent: deployment.child_runs(p), deployment
            )
            _wait(
                "adoption",
                lambda p=parent: (
                    f"continued: started by Dagster run {p}"
                    in deployment.run_messages(retries[p], 300)
                ),
                deployment,
            )
        (count_dir / "release").touch()
        for retry in retries.values():
            status, _ = deployment.wait_for_run(retry, timeout=120)
            assert status == "SUCCESS", deployment.run_messages(retry)

        for parent, retry in retries.items():
            assert (count_dir / f"trained_{parent}").read_text().split() == ["started"]
            assert deployment.materializations(parent) == {}  # the orphan recorded nothing
            (recorded,) = deployment.materializations(retry).values()  # materialized once
            assert recorded[GPU_HOURS] > 0  # its GPU-hours, recorded once
        assert local_workspace.admin.counters()["runs_created"] == TRIALS  # a GPU run each
        with AirClient(local_workspace.host, local_workspace.token) as client:
            assert client.list_runs(active_only=True)[0] == []  # none left running
    finally:
        (count_dir / "release").touch()  # never leave a training holding
        deployment.stop()
