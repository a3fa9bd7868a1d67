"""A run worker SIGKILLed while its step waits on a GPU run, on a real deployment (webserver
and daemon on PostgreSQL, run monitoring and run retries on): Dagster fails the run (its code
server sees the worker die; run monitoring would, past ``dagster/max_runtime``), the retries
daemon retries it, and the retry adopts the GPU run its parent started: one GPU run, one
training, the asset materialized once."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest
from dagster_deployment import DagsterDeployment

from air_runtime import AirClient

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

DEFINITIONS = Path(__file__).with_name("dagster_recovery") / "definitions.py"
LOCATION = "air_recovery"
MAX_RUNTIME_S = 20  # how long a run may live before run monitoring fails it
PID = re.compile(r"Executing steps in process \(pid: (\d+)\)")


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


def test_a_killed_run_worker_s_retry_adopts_its_gpu_run(
    tmp_path: Path, postgres: str, local_workspace
):
    count_dir = tmp_path / "count"
    count_dir.mkdir()
    deployment = DagsterDeployment(
        tmp_path,
        database_dsn=f"{postgres}/airo_dagster",  # the deployments run one at a time
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
            "run_monitoring": {"enabled": True, "poll_interval_seconds": 1},
            "run_retries": {"enabled": True},
        },
    )
    trained = count_dir / "trained"
    try:
        deployment.start()
        parent = deployment.launch(location=LOCATION, job="held_job")

        # The rank started and the step recorded its GPU run: the worker is waiting on it.
        _wait("training", trained.exists, deployment)
        _wait("launch", lambda: "submitted run" in deployment.run_messages(parent, 300), deployment)
        pid = _wait(
            "run worker pid", lambda: PID.search(deployment.run_messages(parent, 300)), deployment
        )
        os.kill(int(pid.group(1)), signal.SIGKILL)

        status, _ = deployment.wait_for_run(parent, timeout=MAX_RUNTIME_S + 120)
        assert status == "FAILURE"
        # Dagster's code server saw its run worker die (run monitoring's max runtime is the
        # backstop where no process watches the worker).
        assert "SIGKILL" in deployment.run_messages(parent, 300)
        (retry,) = _wait("run retry", lambda: deployment.child_runs(parent), deployment)
        _wait(
            "adoption",
            lambda: (
                f"continued: started by Dagster run {parent}" in deployment.run_messages(retry, 300)
            ),
            deployment,
        )
        (count_dir / "release").touch()
        status, _ = deployment.wait_for_run(retry, timeout=120)
        assert status == "SUCCESS", deployment.run_messages(retry)

        assert trained.read_text().split() == ["started"]  # trained once
        assert local_workspace.admin.counters()["runs_created"] == 1  # one GPU run
        with AirClient(local_workspace.host, local_workspace.token) as client:
            assert client.list_runs(active_only=True)[0] == []  # none left running
        assert deployment.materializations(parent) == {}
        assert set(deployment.materializations(retry)) == {("held",)}  # materialized once
    finally:
        (count_dir / "release").touch()  # never leave the training holding
        deployment.stop()
