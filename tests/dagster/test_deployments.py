"""One deployment, one run: two Dagster instances sharing one workspace never get each
other's runs (even for the same Dagster run id), and concurrent partitions never share secret
keys. Each job runs in a process of its own (``remote_jobs.py``), the way a run worker does."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import dagster as dg
import psutil
import pytest
from dagster_checks import counters, node_log

from air_runtime import AirClient

REMOTE_JOBS = Path(__file__).with_name("remote_jobs.py")


def _home(path: Path) -> Path:
    path.mkdir()
    (path / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    return path


def _start(local_workspace, home: Path, command: str, **extra: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "AIRO_HOST": local_workspace.host,
        "AIRO_TOKEN": local_workspace.token,
        "AIR_TEST_COMMAND": command,
        **extra,
    }
    return subprocess.Popen(
        [sys.executable, str(REMOTE_JOBS), "multiprocess"],
        env=env,
        cwd=REMOTE_JOBS.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _finish(proc: subprocess.Popen[str], timeout: float = 300) -> str:
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        output, _ = proc.communicate()
        raise AssertionError(f"the job process did not end:\n{output[-4000:]}") from None
    assert proc.returncode == 0, output[-4000:]
    return output


def _wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _running(local_workspace) -> list[int]:
    with AirClient(local_workspace.host, local_workspace.token) as client:
        runs, _ = client.list_runs(active_only=True)
    return [r.run_id for r in runs if r.life_cycle_state == "RUNNING"]


def _step_pid(proc) -> int | None:
    """The multiprocess executor's step process (a `multiprocessing` spawn child)."""
    for child in psutil.Process(proc.pid).children(recursive=True):
        try:
            if any("spawn_main" in part for part in child.cmdline()):
                return child.pid
        except psutil.NoSuchProcess:
            continue
    return None


def _materialized_run(home: Path, run_id: str) -> int:
    with dg.DagsterInstance.from_config(str(home)) as instance:
        (mat,) = instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION)
    return mat.dagster_event.event_specific_data.materialization.metadata[
        "dagster-air/run_id"
    ].value


@pytest.mark.slow
def test_two_instances_same_run_id_get_their_own_runs_and_reattach_to_their_own(
    local_workspace, tmp_path
):
    dev, prod = _home(tmp_path / "dev"), _home(tmp_path / "prod")
    run_id = str(uuid.uuid4())  # the same Dagster run id in both instances

    _finish(_start(local_workspace, dev, "echo result-of-dev\n", AIR_TEST_RUN_ID=run_id))
    dev_run = _materialized_run(dev, run_id)

    # The other instance: a run of its own, whose step process is killed while it waits
    # (the run goes on until then); Dagster retries the step, which reattaches to prod's
    # run (not dev's).
    release = tmp_path / "release"
    proc = _start(
        local_workspace,
        prod,
        f'echo started\nwhile [ ! -e "{release}" ]; do sleep 0.2; done\necho result-of-prod\n',
        AIR_TEST_RUN_ID=run_id,
        AIR_TEST_RETRIES="1",
    )
    try:
        (prod_run,) = _wait_for(lambda: _running(local_workspace), 120, "prod's run")
        pid = _wait_for(lambda: _step_pid(proc), 30, "the step process id")
        os.kill(pid, signal.SIGKILL)
        release.touch()
        _finish(proc)
    finally:
        release.touch()
        if proc.poll() is None:
            proc.kill()
    assert prod_run != dev_run
    assert _materialized_run(prod, run_id) == prod_run
    with dg.DagsterInstance.from_config(str(prod)) as instance:
        retries = instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_UP_FOR_RETRY)
    assert len(retries) == 1  # the crash really made Dagster retry the step
    seen = counters(local_workspace)
    assert seen["runs_created"] == 2
    assert sorted(seen["submits_per_token"].values()) == [1, 2]  # prod resubmitted its own
    assert "result-of-dev" in node_log(local_workspace, dev_run)
    prod_log = node_log(local_workspace, prod_run)
    assert "result-of-prod" in prod_log and "result-of-dev" not in prod_log


def _scope_keys(local_workspace, scope: str = "dagster-air") -> list[str]:
    with AirClient(local_workspace.host, local_workspace.token) as client:
        return [s.key for s in client.list_secrets(scope)]


def test_concurrent_partitions_see_their_own_secret_and_leave_no_key(
    local_workspace, dagster_home, instance, tmp_path
):
    # (``instance`` creates the instance's storage first: the two run processes share it.)
    values = {"p1": "hf_ValueOfPartitionOne_51c0", "p2": "hf_ValueOfPartitionTwo_93ab"}
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    release = tmp_path / "release"
    command = (
        'echo "seen $(printf %s "$HF_TOKEN" | sha256sum | cut -c1-64)"\n'
        f"touch {barrier}/$$\n"
        f'for i in $(seq 1500); do [ "$(ls {barrier} | wc -l)" -ge 2 ] && break; sleep 0.2; done\n'
        # Both going until the test has seen them.
        f'while [ ! -e "{release}" ]; do sleep 0.2; done\n'
    )
    procs = [
        _start(
            local_workspace,
            dagster_home,
            command,
            AIR_TEST_PARTITIONS="p1,p2",
            AIR_TEST_PARTITION=partition,
            AIR_TEST_SECRET="1",
            TEST_HF_TOKEN=value,
        )
        for partition, value in values.items()
    ]
    try:
        try:
            _wait_for(lambda: len(_running(local_workspace)) == 2, 240, "both runs to be RUNNING")
        except AssertionError:
            outputs = []
            for proc in procs:
                if proc.poll() is not None:
                    outputs.append(proc.communicate()[0][-3000:])
            raise AssertionError("\n----\n".join(outputs)) from None
        keys = _scope_keys(local_workspace)
        assert len([k for k in keys if k.endswith(".HF_TOKEN")]) == 2, keys
        release.touch()
        for proc in procs:
            _finish(proc)
    finally:
        release.touch()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    with AirClient(local_workspace.host, local_workspace.token) as client:
        runs, _ = client.list_runs(active_only=False)
    assert len(runs) == 2
    seen = {
        line.split()[1]
        for run in runs
        for line in node_log(local_workspace, run.run_id).splitlines()
        if line.startswith("seen ")
    }
    assert seen == {hashlib.sha256(v.encode()).hexdigest() for v in values.values()}
    assert _scope_keys(local_workspace) == []  # deleted once the runs ended


def test_the_namespace_is_made_once_per_instance(instance, tmp_path):
    from dagster_air._identity import NAMESPACE_KEY, _insert_if_absent, deployment_namespace

    made = deployment_namespace(instance)
    assert made == deployment_namespace(instance)
    # A second writer racing the first: its insert loses, everyone reads the first value.
    assert _insert_if_absent(instance.run_storage, NAMESPACE_KEY, "a-later-candidate")
    assert deployment_namespace(instance) == made
    assert deployment_namespace(instance, "pinned-prod") == "pinned-prod"
    with dg.DagsterInstance.from_config(str(_home(tmp_path / "other"))) as other:
        assert deployment_namespace(other) not in ("", made)
