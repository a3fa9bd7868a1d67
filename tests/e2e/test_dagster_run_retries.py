"""Run workers SIGKILLed while their steps wait on GPU runs, on a real deployment (webserver
and daemon on PostgreSQL, run monitoring and run retries on, Dagster's default multiprocess
executor), shared by the tests of this file.

Three trials at once: Dagster fails each run (its code server sees the worker die; run
monitoring would, past ``dagster/max_runtime``), the retries daemon retries it, and the
retry adopts the GPU run its parent started. The killed worker's step subprocess outlives it
(re-parented to PID 1): it sees its run failed, stops and records nothing. Per trial: one
GPU run, one training, one materialization, its GPU-hours recorded once.

A checkpointing trainer whose run worker is killed, then whose GPU run loses its node at step
73: the run retry finds that run failed, starts a new one in the same checkpoint folder, and
the trainer resumes at step 70."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import psutil
import pytest
from dagster_deployment import DagsterDeployment
from deployment_services import POSTGRES_URL, POSTGRESQL, require_services
from managed_process import own_database

from air_runtime import AirClient
from air_runtime.local import LocalWorkspace, start_local_workspace

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

DEFINITIONS = Path(__file__).with_name("dagster_recovery") / "definitions.py"
LOCATION = "air_recovery"
# How long a run may live before run monitoring fails it: a backstop only (the code server
# sees its worker die), longer than a retry waits for the test's release on a busy machine
# (20 s failed a retry that had succeeded its step).
MAX_RUNTIME_S = 600
TRIALS = 3
WORKER_PID = re.compile(
    r"Executing steps using multiprocess executor: parent process \(pid: (\d+)\)"
)
SUBMITTED = re.compile(r"submitted run (\d+)")
GPU_HOURS = "dagster-air/gpu_hours"
CHECKPOINT_STEP = "dagster-air/checkpoint_step"


class Recovery(NamedTuple):
    deployment: DagsterDeployment
    workspace: LocalWorkspace
    count_dir: Path  # the deployment's COUNT_DIR, where the ranks write what they did


@pytest.fixture(scope="module")
def recovery(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recovery]:
    """One deployment and local workspace for the tests of this file (starting a deployment
    costs about as much as a test): each test uses its own job and files."""
    require_services(POSTGRESQL)
    root = tmp_path_factory.mktemp("run_retries")
    count_dir = root / "count"
    (count_dir / "checkpointed").mkdir(parents=True)
    with start_local_workspace(data_dir=root / "workspace") as workspace:
        deployment = DagsterDeployment(
            root,
            database_dsn=own_database(POSTGRES_URL, "airo_dagster_run_retries"),
            code_location={
                "python_file": {
                    "relative_path": str(DEFINITIONS),
                    "working_directory": str(DEFINITIONS.parent),
                    "location_name": LOCATION,
                }
            },
            extra_env={
                "AIRO_HOST": workspace.host,
                "AIRO_TOKEN": workspace.token,
                "COUNT_DIR": str(count_dir),
                "MAX_RUNTIME": str(MAX_RUNTIME_S),
            },
            instance_settings={
                "run_coordinator": {
                    "module": "dagster._core.run_coordinator",
                    "class": "QueuedRunCoordinator",
                    "config": {"max_concurrent_runs": 2 * TRIALS},  # the trials and retries
                },
                "run_monitoring": {"enabled": True, "poll_interval_seconds": 1},
                "run_retries": {"enabled": True},
            },
        )
        try:
            deployment.start()
            yield Recovery(deployment, workspace, count_dir)
        finally:
            # Never leave a training or a retry holding.
            (count_dir / "release").touch()
            (count_dir / "checkpointed" / "node_lost").touch()
            deployment.stop()


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


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _kill_run_worker(deployment: DagsterDeployment, run_id: str) -> list[psutil.Process]:
    """SIGKILL the run worker of ``run_id`` (its step waits on its GPU run): its step
    subprocesses, which outlive it."""
    found = _wait(
        "run worker pid",
        lambda: WORKER_PID.search(deployment.run_messages(run_id, 300)),
        deployment,
    )
    worker = int(found.group(1))
    steps = _step_processes(worker)
    os.kill(worker, signal.SIGKILL)
    return steps


def test_killed_run_workers_retries_adopt_their_gpu_runs_recorded_once(recovery: Recovery):
    deployment, local_workspace, count_dir = recovery
    created = local_workspace.admin.counters()["runs_created"]
    try:
        parents = [deployment.launch(location=LOCATION, job="held_job") for _ in range(TRIALS)]

        orphans: dict[str, list[psutil.Process]] = {}
        for parent in parents:
            # The rank started and the step recorded its GPU run: the step waits on it.
            _wait("training", (count_dir / f"trained_{parent}").exists, deployment)
            _wait(
                "launch", lambda p=parent: "submitted run" in deployment.run_messages(p, 300),
                deployment,
            )  # fmt: skip
            orphans[parent] = _kill_run_worker(deployment, parent)
            assert len(orphans[parent]) == 1, orphans[parent]

        retries = {}
        for parent in parents:
            status, _ = deployment.wait_for_run(parent, timeout=240)
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
        # A GPU run each.
        assert local_workspace.admin.counters()["runs_created"] - created == TRIALS
        with AirClient(local_workspace.host, local_workspace.token) as client:
            assert client.list_runs(active_only=True)[0] == []  # none left running
    finally:
        (count_dir / "release").touch()  # never leave a training holding


def test_a_killed_run_workers_retry_resumes_from_the_checkpoint_in_a_new_gpu_run(
    recovery: Recovery,
):
    """The run worker is killed while its step waits on the GPU run; then the GPU run loses
    its node at step 73 (no platform retry: ``max_retries: 0``), so nobody recorded its end.
    The run retry must not adopt the failed run: it starts a new one, in the same folder,
    which resumes at step 70; the asset is materialized once, by the retry."""
    deployment, local_workspace, count_dir = recovery
    folder = count_dir / "checkpointed"
    created = local_workspace.admin.counters()["runs_created"]
    parent = deployment.launch(location=LOCATION, job="checkpointed_job")
    _wait("step 73", (folder / "at73").exists, deployment)
    launched = _wait(
        "launch", lambda: SUBMITTED.search(deployment.run_messages(parent, 300)), deployment
    )
    gpu_run = int(launched.group(1))
    (orphan,) = _kill_run_worker(deployment, parent)
    status, _ = deployment.wait_for_run(parent, timeout=120)
    assert status == "FAILURE"
    # The node is lost after the kill: no step is left to record that the run failed.
    assert local_workspace.admin.lose_node(gpu_run, 0)
    with AirClient(local_workspace.host, local_workspace.token) as client:
        ended = client.wait(gpu_run, timeout=60, poll_interval=0.2)
    assert ended.result_state == "FAILED", ended
    (retry,) = _wait("run retry", lambda: deployment.child_runs(parent), deployment)
    (folder / "node_lost").touch()  # the retry goes on (``checkpointed`` in the definitions)
    status, _ = deployment.wait_for_run(retry, timeout=120)
    messages = deployment.run_messages(retry, 300)
    assert status == "SUCCESS", messages

    # Two executions: the first from step 0, the retry's from the checkpoint of step 70.
    assert _lines(folder / "starts") == ["0", "70"]
    assert len(_lines(folder / "steps")) == 73 + 30
    assert _lines(folder / "resume") == ["resuming=0 step=", "resuming=1 step=70"]
    first, second = _lines(folder / "dirs")
    assert first == second  # the folder of the root run, not of the retry
    assert parent in first and retry not in second
    # A new GPU run, not the failed one adopted.
    assert "(a new run: this step's earlier run ended unsuccessfully)" in messages
    assert f"submitted run {gpu_run}" not in messages
    assert local_workspace.admin.counters()["runs_created"] - created == 2
    assert deployment.materializations(parent) == {}  # the orphan recorded nothing
    (recorded,) = deployment.materializations(retry).values()  # materialized once
    assert recorded[CHECKPOINT_STEP] == 100
    _wait("the orphaned step to stop", lambda: _gone(orphan), deployment)
