"""Re-execution trains only what is missing: a 4-partition sweep backfilled as one run
(``BackfillPolicy.single_run()``), one partition out of GPU memory once. Trainings are
counted by what the ranks wrote, not by the API's view."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
import reexecution_jobs
from dagster_checks import counters, failure_data
from reexecution_jobs import (
    CHECKED_RANGE,
    KEYS,
    held_config,
    held_job,
    held_job_changed,
    run_config,
    sweep_job,
    workflow_config,
    workflow_job,
)

from air_runtime import AirClient
from dagster_air._lineage import Lineage

RANGE = {
    "dagster/asset_partition_range_start": KEYS[0],
    "dagster/asset_partition_range_end": KEYS[-1],
}
# What the UI's "Re-execute from failure" adds to the parent's tags (execute_job does not).
FROM_FAILURE = {**RANGE, "dagster/is_resume_retry": "true"}


@pytest.fixture
def count_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, air_workspace) -> Path:
    folder = tmp_path / "count"
    folder.mkdir()
    return folder


def _trained(count_dir: Path) -> list[str]:
    path = count_dir / "trained"
    return path.read_text().split() if path.exists() else []


def _materialized(instance: dg.DagsterInstance) -> set[str]:
    return set(instance.get_materialized_partitions(dg.AssetKey("sweep")))


def _step_log(instance: dg.DagsterInstance, run_id: str) -> str:
    return "\n".join(e.user_message for e in instance.all_logs(run_id) if e.user_message)


def test_a_reexecution_from_failure_trains_only_the_failed_partition(
    count_dir, instance, local_workspace
):
    job = dg.reconstructable(sweep_job)
    config = run_config(str(count_dir))
    with dg.execute_job(
        job, instance, tags=RANGE, run_config=config, raise_on_error=False
    ) as first:
        assert not first.success
        parent = first.run_id
    assert sorted(_trained(count_dir)) == KEYS  # one training each, c out of memory
    assert _materialized(instance) == {"a", "b", "d"}

    # The UI's "Re-execute from failure" keeps the parent's tags and run config; execute_job
    # is given them, as the UI would.
    options = dg.ReexecutionOptions.from_failure(parent, instance)
    with dg.execute_job(
        job, instance, tags=FROM_FAILURE, run_config=config, reexecution_options=options
    ) as second:
        assert second.success
        child = second.run_id
    assert sorted(_trained(count_dir)) == sorted([*KEYS, "c"])  # c alone trained again
    assert _materialized(instance) == set(KEYS)
    assert counters(local_workspace)["runs_created"] == 2
    log = _step_log(instance, child)
    assert f"already materialized by run {parent}" in log
    assert "sweep partition a, sweep partition b, sweep partition d" in log
    # Each partition's newest materialization: c trained by the child's remote run, the
    # others kept from the parent's, at no GPU cost here.
    newest = {
        str(r.partition_key): r.asset_materialization
        for r in reversed(instance.fetch_materializations(dg.AssetKey("sweep"), limit=100).records)
    }
    assert newest["c"].metadata["dagster-air/gpu_hours"].value > 0
    assert "dagster-air/kept_from_run" not in newest["c"].metadata
    for key in ("a", "b", "d"):
        assert newest[key].metadata["dagster-air/kept_from_run"].value == parent
        assert newest[key].metadata["dagster-air/gpu_hours"].value == 0


def test_a_workflow_reexecuted_from_failure_runs_only_the_failed_stage(
    count_dir, instance, local_workspace
):
    job = dg.reconstructable(workflow_job)
    config = workflow_config(str(count_dir))
    with dg.execute_job(job, instance, run_config=config, raise_on_error=False) as first:
        assert not first.success
        parent = first.run_id
    assert _trained(count_dir) == ["prep", "train"]
    options = dg.ReexecutionOptions.from_failure(parent, instance)
    with dg.execute_job(
        job,
        instance,
        tags={"dagster/is_resume_retry": "true"},
        run_config=config,
        reexecution_options=options,
    ) as second:
        assert second.success
        child = second.run_id
    assert _trained(count_dir) == ["prep", "train", "train"]  # prep not run again
    assert counters(local_workspace)["runs_created"] == 2
    assert f"already materialized by run {parent}" in _step_log(instance, child)
    for asset in ("prep", "train"):
        (record,) = instance.fetch_materializations(dg.AssetKey(asset), limit=10).records
        assert record.run_id == (parent if asset == "prep" else child)


def test_reexecute_all_trains_everything_again_and_says_so(count_dir, instance, local_workspace):
    job = dg.reconstructable(sweep_job)
    config = run_config(str(count_dir))
    (count_dir / "oom_once").touch()  # no failure: a successful run re-executed whole
    with dg.execute_job(job, instance, tags=RANGE, run_config=config) as first:
        assert first.success
        parent = first.run_id
    options = dg.ReexecutionOptions(parent_run_id=parent)  # "Re-execute all"
    with dg.execute_job(
        job, instance, tags=RANGE, run_config=config, reexecution_options=options
    ) as second:
        assert second.success
        child = second.run_id
    assert sorted(_trained(count_dir)) == sorted(KEYS * 2)
    assert counters(local_workspace)["runs_created"] == 2
    log = _step_log(instance, child)
    assert f"re-executing everything of run {parent} as asked" in log
    assert "training again sweep partition a, sweep partition b" in log


def test_a_reexecution_without_the_partition_tags_is_refused_before_submitting(
    count_dir, instance, local_workspace
):
    job = dg.reconstructable(sweep_job)
    config = run_config(str(count_dir))
    with dg.execute_job(
        job, instance, tags=RANGE, run_config=config, raise_on_error=False
    ) as first:
        assert not first.success
        parent = first.run_id
    trained = _trained(count_dir)
    # A re-execution that carries no partition tags would train some default configuration.
    options = dg.ReexecutionOptions.from_failure(parent, instance)
    with dg.execute_job(
        job, instance, run_config=config, reexecution_options=options, raise_on_error=False
    ) as child:
        assert not child.success
        message = failure_data(child).error.message
    assert "this run names no partition" in message
    assert "re-execute a partitioned run from its run page" in message
    assert _trained(count_dir) == trained
    assert counters(local_workspace)["runs_created"] == 1


def test_a_run_retry_after_its_worker_was_killed_adopts_the_running_gpu_run(
    count_dir, instance, local_workspace
):
    """The run worker is SIGKILLed while it waits; the run is marked failed (what the code
    server that started the worker does) and retried from failure (what the daemon's run
    retries do): the retry waits on the GPU run its parent started instead of starting a
    second one."""
    parent = _kill_worker_while_it_waits(count_dir, instance)
    instance.report_run_failed(instance.get_run_by_id(parent.run_id))
    (count_dir / "release").touch()
    retry_tags = {"dagster/retry_number": "1", "dagster/is_resume_retry": "true"}
    options = dg.ReexecutionOptions.from_failure(parent.run_id, instance)
    with dg.execute_job(
        dg.reconstructable(held_job),
        instance,
        tags=retry_tags,
        run_config=held_config(str(count_dir)),
        reexecution_options=options,
    ) as retry:
        assert retry.success
    assert _trained(count_dir) == ["started"]  # one training
    assert counters(local_workspace)["runs_created"] == 1  # one GPU run
    assert "continued: started by Dagster run " + parent.run_id in _step_log(instance, retry.run_id)
    records = instance.fetch_materializations(dg.AssetKey("held"), limit=10).records
    assert len(records) == 1
    with AirClient(local_workspace.host, local_workspace.token) as client:
        assert client.list_runs(active_only=True)[0] == []  # none left running


def _kill_worker_while_it_waits(
    count_dir: Path, instance: dg.DagsterInstance, job: str = "held", waits_for: str = "started"
) -> dg.DagsterRun:
    """Start held_job (or ``checked``: checked_job) in a run worker of its own and SIGKILL it
    once its step waits on the GPU run whose rank wrote ``waits_for`` (the rank started,
    its launch recorded); the Dagster run it leaves."""
    worker = subprocess.Popen(
        [sys.executable, str(Path(reexecution_jobs.__file__)), str(count_dir)]
        + ([job] if job != "held" else []),
        cwd=Path(reexecution_jobs.__file__).parent,
        env={**os.environ, "PYTHONPATH": str(Path(reexecution_jobs.__file__).parent)},
    )
    try:
        # The event meant: the rank started (the worker is then waiting on its run).
        deadline = time.monotonic() + 120
        while waits_for not in _trained(count_dir):
            assert worker.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        (parent,) = instance.get_runs()
        while _launched(instance, parent.run_id) < (2 if job == "checked" else 1):
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    return parent


def test_a_run_retry_adopts_the_run_after_a_blocking_check_and_still_skips_the_blocked(
    count_dir, instance, local_workspace
):
    """A workflow split at a blocking check: the worker is killed while the second run (the
    stage after the check, for the one partition whose check passed) holds its GPU; the
    retry gets both runs back (the first ended, the second still going), lets through the
    same rows and starts nothing more: the blocked partition's rank never executes."""
    parent = _kill_worker_while_it_waits(count_dir, instance, "checked", "evaluate-good")
    instance.report_run_failed(instance.get_run_by_id(parent.run_id))
    (count_dir / "release").touch()
    options = dg.ReexecutionOptions.from_failure(parent.run_id, instance)
    with dg.execute_job(
        dg.reconstructable(reexecution_jobs.checked_job),
        instance,
        tags={"dagster/retry_number": "1", "dagster/is_resume_retry": "true", **CHECKED_RANGE},
        run_config=reexecution_jobs.checked_config(str(count_dir)),
        reexecution_options=options,
    ) as retry:
        assert not retry.success  # the bad partition stays blocked
    assert sorted(_trained(count_dir)) == ["evaluate-good", "prepare-bad", "prepare-good"]
    assert counters(local_workspace)["runs_created"] == 2  # no run submitted again
    log = _step_log(instance, retry.run_id)
    assert "continued: started by Dagster run " + parent.run_id in log
    assert "cannot adopt" not in log
    materialized = {
        (str(r.asset_key.path[-1]), r.partition_key)
        for key in ("prepare", "evaluate")
        for r in instance.fetch_materializations(dg.AssetKey(key), limit=10).records
    }
    assert materialized == {("prepare", "bad"), ("prepare", "good"), ("evaluate", "good")}


def test_a_reexecution_trains_again_what_a_blocking_check_refused_and_never_runs_after_it(
    count_dir, instance, local_workspace
):
    """Re-executed from failure, a row whose blocking check failed is not kept (the check
    runs again): its downstream stage never runs on what the check refused."""
    (count_dir / "release").touch()
    job = dg.reconstructable(reexecution_jobs.checked_job)
    config = reexecution_jobs.checked_config(str(count_dir))
    with dg.execute_job(job, instance, run_config=config, tags=CHECKED_RANGE) as first:
        assert not first.success
    assert sorted(_trained(count_dir)) == ["evaluate-good", "prepare-bad", "prepare-good"]
    options = dg.ReexecutionOptions.from_failure(first.run_id, instance)
    with dg.execute_job(
        job,
        instance,
        run_config=config,
        tags={**CHECKED_RANGE, "dagster/is_resume_retry": "true"},
        reexecution_options=options,
    ) as again:
        assert not again.success  # bad's check fails again
    # bad's prepare trained again (and refused again); good's rows kept; bad's evaluate never.
    assert sorted(_trained(count_dir)) == [
        "evaluate-good",
        "prepare-bad",
        "prepare-bad",
        "prepare-good",
    ]


def test_a_retry_that_cannot_adopt_its_parent_s_gpu_run_cancels_it_before_submitting(
    count_dir, instance, local_workspace
):
    """A deploy between the worker's death and the retry changed the asset (another
    experiment): the retry cannot adopt the parent's GPU run, so it cancels it, and only then
    submits its own. Never both at once."""
    parent = _kill_worker_while_it_waits(count_dir, instance)
    # The old training holds until cancelled (nothing releases it); the new one does not hold.
    instance.report_run_failed(instance.get_run_by_id(parent.run_id))
    options = dg.ReexecutionOptions.from_failure(parent.run_id, instance)
    with dg.execute_job(
        dg.reconstructable(held_job_changed),
        instance,
        tags={"dagster/retry_number": "1", "dagster/is_resume_retry": "true"},
        run_config=held_config(str(count_dir)),
        reexecution_options=options,
    ) as retry:
        assert retry.success
    log = _step_log(instance, retry.run_id)
    assert (
        f"started by Dagster run {parent.run_id} and still going: this attempt cannot adopt" in log
    )
    assert counters(local_workspace)["runs_created"] == 2
    assert _trained(count_dir) == ["started", "started_v2"]
    with AirClient(local_workspace.host, local_workspace.token) as client:
        old, new = sorted(client.list_runs(active_only=False)[0], key=lambda r: r.run_id)
        old, new = client.get_run(old.run_id), client.get_run(new.run_id)
    assert old.result_state == "CANCELED"
    assert new.is_success
    assert old.end_time is not None and new.start_time is not None
    assert old.end_time <= new.start_time  # the old run had ended before the new one began


def _launched(instance: dg.DagsterInstance, run_id: str) -> int:
    return sum("dagster-air/launch" in str(e.dagster_event) for e in instance.all_logs(run_id))


def test_a_row_is_kept_only_if_materialized_with_the_same_code_version(instance):
    @dg.multi_asset(specs=[dg.AssetSpec("trained", code_version="workload-v1")])
    def trained():
        yield dg.MaterializeResult(asset_key="trained", metadata={"loss": 0.1})

    run = dg.materialize([trained], instance=instance).dagster_run
    lineage = Lineage(instance, (run,), run.run_id, False, None)
    key = dg.AssetKey("trained")
    assert lineage.materialized(key, "workload-v1")[None][0] == run.run_id
    assert lineage.materialized(key, "workload-v2") == {}  # the workload changed: train again
