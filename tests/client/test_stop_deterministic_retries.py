"""The failure policy's deterministic setting (``stop_deterministic_retries``): an attempt that fails in a way retries will not change (a
deterministic diagnosis) ends the wait before the platform's retries run their course; any
other failure is retried as the workload asked. Real runs of the local workspace."""

from __future__ import annotations

from pathlib import Path

import pytest

from air_runtime import (
    AirClient,
    AsyncAirClient,
    FailurePolicy,
    RetriesStopped,
    RunWatcher,
    load_workload,
)

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB."

# The first attempt fails (leaving a mark); every retry waits until it is cancelled, or,
# with ``then: exit 0``, succeeds: a test sees the first failure while the run goes on.
JOB = """experiment_name: {name}
compute: {{accelerator_type: GPU_1xA10, num_accelerators: 1}}
max_retries: 3
command: |
  if [ -e {mark} ]; then {then}; fi
  touch {mark}
  echo "loading the model"
  echo "{failure}"
  exit 1
"""
WAIT_FOREVER = "while true; do sleep 0.05; done"


def _submit(client: AirClient, tmp_path: Path, name: str, failure: str, then: str) -> int:
    workload = load_workload(
        JOB.format(name=name, mark=tmp_path / f"{name}.mark", failure=failure, then=then)
    )
    return client.submit_workload(workload).run_id


def _expect_stopped(error: RetriesStopped, run_id: int, name: str) -> None:
    assert str(error) == (
        f"CUDA out of memory on node 0 (deterministic, task {name}, retry 0 of 3): reduce the "
        f"batch size or use more accelerators; retries will not help; further retries of run "
        f"{run_id} stopped (failure_policy: deterministic -> stop)"
    )
    assert error.run_id == run_id


def _cancelled_after_one_failure(client: AirClient, run_id: int) -> None:
    client.cancel(run_id)
    state = client.wait(run_id, timeout=120, poll_interval=0.2)
    assert state.result_state == "CANCELED", state.describe()
    attempts = [(a.attempt_number, a.result_state) for a in state.task_attempts()]
    # Attempt 0 failed; the retry the platform had started is the one cancelled.
    assert attempts[0] == (0, "FAILED") and len(attempts) <= 2, attempts


def test_a_deterministic_failure_stops_the_client_wait(workspace_factory, tmp_path: Path):
    ws = workspace_factory()
    with AirClient(ws.host, ws.token) as client:
        run_id = _submit(client, tmp_path, "oom-client", OOM, WAIT_FOREVER)
        with pytest.raises(RetriesStopped) as stopped:
            client.wait(run_id, timeout=120, poll_interval=0.2, stop_deterministic_retries=True)
        _expect_stopped(stopped.value, run_id, "oom-client")
        _cancelled_after_one_failure(client, run_id)


def test_other_failures_are_retried_as_asked(workspace_factory, tmp_path: Path):
    ws = workspace_factory()
    with AirClient(ws.host, ws.token) as client:
        run_id = _submit(client, tmp_path, "flaky", "connection reset by peer", "exit 0")
        state = client.wait(run_id, timeout=120, poll_interval=0.2, stop_deterministic_retries=True)
    assert state.result_state == "SUCCESS"
    assert [(a.attempt_number, a.result_state) for a in state.task_attempts()] == [
        (0, "FAILED"),
        (1, "SUCCESS"),
    ]


@pytest.mark.parametrize("as_stage", [False, True], ids=["run", "stage"])
async def test_a_deterministic_failure_stops_the_watcher_wait(
    workspace_factory, tmp_path: Path, as_stage: bool
):
    ws = workspace_factory()
    name = f"oom-watched-{'stage' if as_stage else 'run'}"
    with AirClient(ws.host, ws.token) as client:
        run_id = _submit(client, tmp_path, name, OOM, WAIT_FOREVER)
    async with AsyncAirClient(ws.host, ws.token) as aclient:
        watcher = RunWatcher(aclient, interval=0.2)
        with pytest.raises(RetriesStopped) as stopped:
            await watcher.wait(
                run_id,
                timeout=120,
                task_key=name if as_stage else None,
                stop_deterministic_retries=True,
            )
        assert watcher.watched == 0
    _expect_stopped(stopped.value, run_id, name)
    with AirClient(ws.host, ws.token) as client:
        _cancelled_after_one_failure(client, run_id)


async def test_a_platform_only_policy_waits_for_every_retry(workspace_factory, tmp_path: Path):
    """``FailurePolicy.platform_only()`` (the former default): the platform's retries run
    (here the second attempt succeeds) and no log is read while waiting."""
    ws = workspace_factory()
    with AirClient(ws.host, ws.token) as client:
        run_id = _submit(client, tmp_path, "oom-default", OOM, "exit 0")
    ws.admin.reset_counters()
    async with AsyncAirClient(ws.host, ws.token) as aclient:
        state = await RunWatcher(aclient, interval=0.2).wait(
            run_id, timeout=120, failure_policy=FailurePolicy.platform_only()
        )
    assert state.result_state == "SUCCESS" and len(state.task_attempts()) == 2
    requests = ws.admin.counters()["requests"]
    assert not any("logs" in path for path in requests), requests


def test_airo_run_stops_and_cancels(workspace_factory, tmp_path: Path, capsys):
    from air_runtime.cli import main as airo

    ws = workspace_factory()
    token = tmp_path / "token"
    token.write_text(ws.token)
    token.chmod(0o600)
    job = tmp_path / "oom.yaml"
    job.write_text(
        JOB.format(name="oom-airo", mark=tmp_path / "airo.mark", failure=OOM, then=WAIT_FOREVER)
    )
    auth = ["--host", ws.host, "--token-file", str(token)]
    assert airo(["run", str(job), "--stop-deterministic-retries", *auth]) == 3
    out, err = capsys.readouterr()
    run_id = int(out.split()[1].rstrip(":"))
    assert "error: CUDA out of memory on node 0 (deterministic, task oom-airo, retry 0 of 3)" in err
    assert f"further retries of run {run_id} stopped" in err
    assert f"run {run_id} cancelled: it ended" in err and "CANCELED" in err, err
    with AirClient(ws.host, ws.token) as client:
        state = client.get_run(run_id)
    assert state.result_state == "CANCELED" and len(state.task_attempts()) <= 2
