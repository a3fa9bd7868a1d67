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
from dagster_air._accelerators import AcceleratorClaim, peak_accelerators, queue_in_lanes

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
    # The other step sizes it 3 (someone changed the GPU pool in between), this one 4: the
    # pool keeps the size set first, and this step counts with it.
    from dagster._core.storage.event_log.schema import ConcurrencyLimitsTable

    storage = instance.event_log_storage
    set_slots = storage.set_concurrency_slots
    log = _Log()

    def lose_the_race(pool: str, slots: int) -> None:
        if pool == "gpu-pool" and storage.get_concurrency_info(pool).limit is None:
            set_slots(pool, 3)  # the other step, first
            with storage.index_connection() as conn:  # type: ignore[attr-defined]  # stale read
                conn.execute(
                    ConcurrencyLimitsTable.insert().values(concurrency_key=pool, limit=slots)
                )
        set_slots(pool, slots)

    monkeypatch.setattr(storage, "set_concurrency_slots", lose_the_race)
    claim = AcceleratorClaim(instance, "gpu-pool", "run-b", "train", 2, log)  # type: ignore[arg-type]
    claim.acquire(claim.limit(lambda: (4, "GPU pool gpu-a10")))
    assert storage.get_concurrency_info("gpu-pool").limit == 3
    assert log.lines == ["holding 2 of the 3 slots of accelerator pool gpu-pool"]
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


def test_partitions_are_queued_in_lanes_that_fit_the_pool() -> None:
    sizes = [("a", 1), ("b", 2), ("c", 1), ("d", 2), ("e", 1), ("f", 2)]
    # The 2s open two lanes (4 in all); the others join the lane with the fewest.
    assert queue_in_lanes(sizes, 4) == [["b", "c", "f"], ["a", "d", "e"]]
    assert queue_in_lanes(sizes, 5) == [["b", "f"], ["c", "d"], ["a", "e"]]  # 2 + 2 + 1
    assert queue_in_lanes(sizes, 9) == [["b"], ["d"], ["f"], ["a"], ["c"], ["e"]]  # all at once
    assert queue_in_lanes([("a", 1), ("b", 5)], 4) is None  # b alone never fits


def test_a_range_run_larger_than_its_pool_queues_its_partitions_within_the_run(
    gpu_workspace: LocalWorkspace, instance: dg.DagsterInstance, tmp_path: Path
) -> None:
    # Six partitions of 1 and 2 accelerators (9 in all) on a pool of 4, as one range run
    # (what a BackfillPolicy.single_run() backfill launches): one submission, never more
    # than 4 accelerators asked of the GPU pool, each partition trained once at its size.
    sizes = {"lr-0.1": 1, "lr-0.05": 2, "lr-0.03": 1, "lr-0.01": 2, "lr-0.005": 1, "lr-0.001": 2}
    ranks = tmp_path / "ranks"
    assets = build_air_assets(
        AirStage(
            key="lanes",
            workload={
                "experiment_name": "lanes",
                "compute": {
                    "accelerator_type": "GPU_1xA10",
                    "num_accelerators": 1,
                    "pool_id": GPU_POOL,
                },
                "max_retries": 0,
                "command": f'echo "$AIRO_PARTITION_KEY $WORLD_SIZE" >> "{ranks}"; sleep 1',
            },
        ),
        partitions_def=dg.StaticPartitionsDefinition(list(sizes)),
        partition_overrides={k: {"compute.num_accelerators": n} for k, n in sizes.items()},
        backfill_policy=dg.BackfillPolicy.single_run(),
        accelerator_pool=ACCELERATOR_POOL,
    )
    keys = list(sizes)
    result = dg.materialize(
        [assets],
        resources={"air_workspace": _workspace(gpu_workspace)},
        instance=instance,
        tags={
            "dagster/asset_partition_range_start": keys[0],
            "dagster/asset_partition_range_end": keys[-1],
        },
    )
    assert result.success
    assert {m.partition for m in result.asset_materializations_for_node("lanes")} == set(keys)
    # Each rank wrote its partition and world size: every partition once, at its size.
    lines = sorted(ranks.read_text().split("\n")[:-1])
    assert lines == sorted(f"{k} {n}" for k, n in sizes.items() for _ in range(n))
    assert gpu_workspace.admin.counters()["runs_created"] == 1
    ledger = gpu_workspace.admin.pool_ledger()[GPU_POOL]
    assert 2 <= ledger["peak_asked"] <= 4, ledger
    assert ledger["waits"] == 0, ledger
    messages = [e.message for e in instance.all_logs(result.run_id) if e.message]
    assert any("queued within the run in 2 lane(s)" in m for m in messages), messages
    assert any(m.startswith("holding 4 of the 4 slots") for m in messages), messages


class _NoWait(Exception):
    pass


def _never_sleep(seconds: float) -> None:
    raise _NoWait(seconds)


def test_slots_of_an_ended_run_come_back_at_the_first_check(
    instance: dg.DagsterInstance,
) -> None:
    from dagster._core.storage.dagster_run import DagsterRun, DagsterRunStatus

    storage = instance.event_log_storage
    storage.set_concurrency_slots("ended-pool", 2)
    # A run whose worker died holding both slots; Dagster marked it failed.
    instance.add_run(
        DagsterRun(job_name="sweep", run_id="dead-run", status=DagsterRunStatus.FAILURE)
    )
    for entry in ("train[accelerator 1/2]", "train[accelerator 2/2]"):
        assert storage.claim_concurrency_slot("ended-pool", "dead-run", entry).is_claimed
    log = _Log()
    log.warning = log.info  # type: ignore[method-assign]
    claim = AcceleratorClaim(instance, "ended-pool", "new-run", "train", 2, log, sleep=_never_sleep)  # type: ignore[arg-type]
    claim.acquire(2)  # no wait at all: the dead run's slots were given back at once
    assert any("held by Dagster run dead-run, which ended (FAILURE)" in m for m in log.lines)
    claim.release()


def test_a_waiting_step_does_not_count_itself_among_the_holders(
    instance: dg.DagsterInstance,
) -> None:
    from dagster._core.storage.dagster_run import DagsterRun, DagsterRunStatus

    storage = instance.event_log_storage
    storage.set_concurrency_slots("busy-pool", 3)
    instance.add_run(
        DagsterRun(job_name="sweep", run_id="live-run", status=DagsterRunStatus.STARTED)
    )
    for entry in ("a[accelerator 1/2]", "a[accelerator 2/2]"):
        assert storage.claim_concurrency_slot("busy-pool", "live-run", entry).is_claimed
    log = _Log()
    claim = AcceleratorClaim(instance, "busy-pool", "my-run", "b", 2, log, sleep=_never_sleep)  # type: ignore[arg-type]
    with pytest.raises(_NoWait):  # it holds 1 and waits for the second
        claim.acquire(3)
    (waiting,) = [m for m in log.lines if m.startswith("waiting for")]
    assert "2 of 3 slots held by run(s) live-run; this step holds 1" in waiting
    assert "my-run" not in waiting
    claim.release()
