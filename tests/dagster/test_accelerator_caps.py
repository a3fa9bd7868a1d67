"""Accelerator caps: steps of mixed sizes hold one slot of their accelerator pool per
accelerator, taken before submitting, so a GPU pool is never asked for more than it
reserves and nothing waits for capacity at the platform."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from accelerator_jobs import ACCELERATOR_POOL, GPU_POOL, SIZES

from air_runtime.local import LocalWorkspace, start_local_workspace
from dagster_air import AirStage, AirWorkspace, build_air_assets
from dagster_air._accelerators import AcceleratorClaim, peak_accelerators

JOBS = Path(__file__).with_name("accelerator_jobs.py")


@pytest.fixture
def gpu_workspace(tmp_path: Path) -> Iterator[LocalWorkspace]:
    """A local workspace with a GPU pool of 4 accelerators."""
    pool = {"pool_id": GPU_POOL, "accelerator_type": "GPU_1xA10", "accelerator_count": 4}
    workspace = start_local_workspace(data_dir=tmp_path / "gpu_workspace", gpu_pools=[pool])
    try:
        yield workspace
    finally:
        workspace.stop()


def _workspace(local: LocalWorkspace) -> AirWorkspace:
    return AirWorkspace(host=local.host, token=local.token, poll_interval=0.2)


def test_a_run_holds_the_most_accelerators_its_tasks_hold_at_once() -> None:
    # train (2) -> evaluate (1): one after the other
    assert peak_accelerators({"train": (2, ()), "evaluate": (1, ("train",))}) == 2
    # a range run: independent partitions add up
    assert peak_accelerators({"p1": (1, ()), "p2": (2, ()), "p3": (1, ())}) == 4
    # a diamond: the two middle stages run together
    diamond = {"a": (1, ()), "b": (2, ("a",)), "c": (3, ("a",)), "d": (1, ("b", "c"))}
    assert peak_accelerators(diamond) == 5
    # two partitions of a two-stage pipeline
    assert (
        peak_accelerators({"t1": (2, ()), "e1": (1, ("t1",)), "t2": (2, ()), "e2": (1, ("t2",))})
        == 4
    )


def test_steps_of_mixed_sizes_never_ask_the_gpu_pool_for_more_than_it_reserves(
    gpu_workspace: LocalWorkspace, dagster_home: Path, instance: dg.DagsterInstance
) -> None:
    env = {
        **os.environ,
        "DAGSTER_HOME": str(dagster_home),
        "AIRO_HOST": gpu_workspace.host,
        "AIRO_TOKEN": gpu_workspace.token,
    }
    done = subprocess.run(
        [sys.executable, str(JOBS)],
        env=env,
        cwd=JOBS.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    ledger = gpu_workspace.admin.pool_ledger()[GPU_POOL]
    assert ledger["peak_asked"] <= 4, ledger  # 6 if every step had submitted at once
    assert ledger["waits"] == 0, ledger  # nothing waited PENDING for capacity
    info = instance.event_log_storage.get_concurrency_info(ACCELERATOR_POOL)
    assert info.limit == 4  # sized from the GPU pool's reservation on first use
    assert not info.claimed_slots and not info.pending_steps  # all given back
    (run,) = instance.get_runs()
    messages = [e.message for e in instance.all_logs(run.run_id) if e.message]
    assert any("waiting for" in m and ACCELERATOR_POOL in m for m in messages)
    held = [m for m in messages if m.startswith("holding ")]
    assert sorted(int(m.split()[1]) for m in held) == sorted(SIZES.values()), held


class _Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, message: str) -> None:
        self.lines.append(message)


def test_a_pool_sized_by_another_step_at_the_same_moment_keeps_that_size(
    instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two steps of two runs find the pool without a limit and both size it. Dagster's
    # storage reads the limit's row, then inserts it: the step that reads before the other
    # inserts fails on the row's unique key. Here that order, with the storage's own insert.
    from dagster._core.storage.event_log.schema import ConcurrencyLimitsTable

    storage = instance.event_log_storage
    set_slots = storage.set_concurrency_slots
    log = _Log()

    def lose_the_race(pool: str, slots: int) -> None:
        if pool == "gpu-pool" and storage.get_concurrency_info(pool).limit is None:
            set_slots(pool, 4)  # the other step, first
            with storage.index_connection() as conn:  # type: ignore[attr-defined]  # stale read
                conn.execute(
                    ConcurrencyLimitsTable.insert().values(concurrency_key=pool, limit=slots)
                )
        set_slots(pool, slots)

    monkeypatch.setattr(storage, "set_concurrency_slots", lose_the_race)
    claim = AcceleratorClaim(instance, "gpu-pool", "run-b", "train", 2, log)  # type: ignore[arg-type]
    claim.acquire(lambda: (4, "GPU pool gpu-a10"))
    assert storage.get_concurrency_info("gpu-pool").limit == 4
    assert log.lines == ["holding 2 of the 4 slots of accelerator pool gpu-pool"]
    claim.release()
    info = storage.get_concurrency_info("gpu-pool")
    assert not info.claimed_slots and not info.pending_steps


def test_a_step_larger_than_its_pool_fails_before_submitting(
    gpu_workspace: LocalWorkspace, instance: dg.DagsterInstance
) -> None:
    instance.event_log_storage.set_concurrency_slots("small-pool", 1)
    assets = build_air_assets(
        AirStage(
            key="big",
            workload={
                "experiment_name": "big",
                "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 2},
                "command": "true",
            },
        ),
        accelerator_pool="small-pool",
    )
    result = dg.materialize(
        [assets],
        resources={"air_workspace": _workspace(gpu_workspace)},
        instance=instance,
        raise_on_error=False,
    )
    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    assert "ask for 2 accelerators at once, more than the 1 slots" in str(
        failure.step_failure_data.error
    )
    assert gpu_workspace.admin.counters()["runs_created"] == 0
    info = instance.event_log_storage.get_concurrency_info("small-pool")
    assert not info.claimed_slots and not info.pending_steps


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"accelerator_pool": "gpu", "pool": "gpu"}, "is also the step's pool"),
        ({"accelerator_pool": "gpu/admission"}, "not ending in /admission"),
        ({"max_gpu_hours": 0}, "max_gpu_hours 0: give a positive number"),
        ({"max_gpu_hours": "1"}, "max_gpu_hours '1': give a positive number"),
    ],
)
def test_caps_and_budgets_that_cannot_work_are_definition_errors(
    options: dict[str, Any], message: str
) -> None:
    stage = AirStage(
        key="s",
        workload={
            "experiment_name": "s",
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
            "command": "true",
        },
    )
    with pytest.raises(dg.DagsterInvalidDefinitionError, match=message):
        build_air_assets(stage, **options)


def test_a_stage_budget_that_cannot_work_is_a_definition_error() -> None:
    with pytest.raises(dg.DagsterInvalidDefinitionError, match="max_gpu_hours -1"):
        AirStage(key="s", workload="w.yaml", max_gpu_hours=-1)
