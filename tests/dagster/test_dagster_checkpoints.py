"""Checkpoints across Dagster re-executions (real Dagster, in process, against the local
workspace): a trainer that loses its node at step 73 resumes at step 70 when the run is
re-executed from failure (the same root run, the same folder); "Re-execute all" starts a new
folder, at step 0, and so does a re-execution after the asset's code version changed. Steps are counted by what the trainer writes. The job:
checkpoint_jobs.py."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
from checkpoint_jobs import checkpoint_job, checkpoint_job_new_code, run_config

from air_runtime import AirClient


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _lose_node_at_step_73(workspace, folder: Path, done: threading.Event) -> None:
    with AirClient(workspace.host, workspace.token) as client:
        while not done.is_set():
            if (folder / "at73").exists():
                for run in client.list_runs(active_only=True)[0]:
                    workspace.admin.lose_node(run.run_id, 0)
                    return
            time.sleep(0.05)


@contextlib.contextmanager
def node_lost_at_step_73(workspace, folder: Path) -> Iterator[None]:
    """While the block runs, the node of the run whose trainer reached step 73 is lost."""
    done = threading.Event()
    loss = threading.Thread(
        target=_lose_node_at_step_73, args=(workspace, folder, done), daemon=True
    )
    loss.start()
    try:
        yield
    finally:
        done.set()
        loss.join(timeout=30)


def test_a_reexecution_from_failure_resumes_and_reexecute_all_starts_again(
    air_workspace, instance, local_workspace, tmp_path
):
    job = dg.reconstructable(checkpoint_job)
    config = run_config(str(tmp_path))
    with (
        node_lost_at_step_73(local_workspace, tmp_path),
        dg.execute_job(job, instance, run_config=config, raise_on_error=False) as first,
    ):
        assert not first.success
        parent = first.run_id
    assert _lines(tmp_path / "starts") == ["0"]
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
    assert _lines(tmp_path / "starts") == ["0", "70"]
    assert len(_lines(tmp_path / "steps")) == 73 + 30
    dirs = _lines(tmp_path / "dirs")
    assert dirs[0] == dirs[1]
    assert _lines(tmp_path / "resume") == ["resuming=0 step=", "resuming=1 step=70"]
    # The materialization (and the step log) shows the newest checkpoint.
    recorded = instance.get_latest_materialization_event(dg.AssetKey("ckpt"))
    metadata = recorded.asset_materialization.metadata
    assert metadata["dagster-air/checkpoint_step"].value == 100
    assert metadata["dagster-air/checkpoint"].value.endswith("/step-100")
    assert metadata["dagster-air/checkpoint"].value.startswith("/Volumes/main/ml/checkpoints/")
    # "Re-execute all": everything again, in a folder of its own.
    with dg.execute_job(
        job,
        instance,
        run_config=config,
        reexecution_options=dg.ReexecutionOptions(parent_run_id=child),
    ) as third:
        assert third.success
    assert _lines(tmp_path / "starts") == ["0", "70", "0"]
    assert _lines(tmp_path / "resume")[2] == "resuming=0 step="
    assert _lines(tmp_path / "dirs")[2] != dirs[0]


def test_new_code_starts_a_new_folder(air_workspace, instance, local_workspace, tmp_path):
    """A re-execution from failure after the asset's code_version changed starts at step 0
    in a folder of its own: another model's checkpoints would not load."""
    config = run_config(str(tmp_path))
    with node_lost_at_step_73(local_workspace, tmp_path):
        job = dg.reconstructable(checkpoint_job)
        with dg.execute_job(job, instance, run_config=config, raise_on_error=False) as first:
            assert not first.success
            parent = first.run_id
    with dg.execute_job(
        dg.reconstructable(checkpoint_job_new_code),
        instance,
        tags={"dagster/is_resume_retry": "true"},
        run_config=config,
        reexecution_options=dg.ReexecutionOptions.from_failure(parent, instance),
    ) as second:
        assert second.success
    assert _lines(tmp_path / "starts") == ["0", "0"]
    dirs = _lines(tmp_path / "dirs")
    assert dirs[0] != dirs[1]
    assert _lines(tmp_path / "resume") == ["resuming=0 step=", "resuming=0 step="]
