"""The failure policy in Dagster: by default a remote run whose first attempt runs out of GPU
memory (while the workload allows 3 retries) is cancelled, and the step fails at once with
the diagnosis first, without a Dagster retry either; with ``stop_deterministic_retries=False``
(the former default) the platform's retry runs (here it succeeds), the step log saying so."""

from __future__ import annotations

import logging
from pathlib import Path

import dagster as dg
from dagster_checks import failure_data

from air_runtime import AirClient
from air_runtime.local import LocalWorkspace
from dagster_air import AirStage, AirWorkspace, build_air_assets

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB."


def _workload(mark: Path, then: str) -> dict:
    return {
        "experiment_name": "oom",
        "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
        "max_retries": 3,
        "command": (f'if [ -e "{mark}" ]; then {then}; fi\ntouch "{mark}"\necho "{OOM}"\nexit 1\n'),
    }


def test_a_deterministic_failure_cancels_the_run_and_fails_the_step(
    air_workspace: AirWorkspace,
    instance: dg.DagsterInstance,
    local_workspace: LocalWorkspace,
    tmp_path: Path,
) -> None:
    # A retry would wait until cancelled.
    workload = _workload(tmp_path / "mark", "while true; do sleep 0.1; done")
    assets = build_air_assets(
        AirStage(key="oom", workload=workload),
        retry_policy=dg.RetryPolicy(max_retries=2),
    )
    result = dg.materialize(
        [assets], resources={"air_workspace": air_workspace}, instance=instance,
        raise_on_error=False,
    )  # fmt: skip
    assert not result.success
    message = failure_data(result).error.message.strip()
    # The step's failure (dg.Failure) is the diagnosis, first.
    message = message.removeprefix("dagster._core.definitions.events.Failure: ")
    assert message.startswith(
        "CUDA out of memory on node 0 (deterministic, task oom, retry 0 of 3): reduce the batch "
        "size or use more accelerators; retries will not help; further retries of run "
    ), message
    assert message.endswith("stopped (failure_policy: deterministic -> stop); cancelled"), message
    run_id = int(message.split("further retries of run ")[1].split()[0])
    with AirClient(local_workspace.host, local_workspace.token) as client:
        state = client.wait(run_id, timeout=60)
    assert state.result_state == "CANCELED", state.describe()
    attempts = [(a.attempt_number, a.result_state) for a in state.task_attempts()]
    assert attempts[0] == (0, "FAILED") and len(attempts) <= 2, attempts
    assert local_workspace.admin.counters()["runs_created"] == 1  # no Dagster retry


def test_a_platform_retry_is_said_in_the_step_log(
    air_workspace: AirWorkspace,
    instance: dg.DagsterInstance,
    local_workspace: LocalWorkspace,
    tmp_path: Path,
) -> None:
    assets = build_air_assets(
        AirStage(key="oom", workload=_workload(tmp_path / "mark", "exit 0")),
        stop_deterministic_retries=False,
    )
    result = dg.materialize([assets], resources={"air_workspace": air_workspace}, instance=instance)
    assert result.success
    warnings = [
        e.message
        for e in instance.all_logs(result.run_id)
        if e.level == logging.WARNING and e.message
    ]
    assert any(
        "CUDA out of memory on node 0 (deterministic): retry 1 of 3 follows" in w for w in warnings
    ), warnings
    mat = result.asset_materializations_for_node("oom")[0]
    assert mat.metadata["dagster-air/attempt_number"].value == 1
