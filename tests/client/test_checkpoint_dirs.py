"""A checkpoint folder per logical task (``air_runtime._checkpoints``): one per deployment,
pipeline, run, task, map index or partition and stage, the same for every attempt of it;
made through the Files API before anything is submitted, so a missing volume is refused
first; the local workspace hands the ranks its own folder of the path."""

from __future__ import annotations

from pathlib import Path

import pytest

from air_runtime import AirClient, ConfigurationError, RunState, load_workload
from air_runtime._submission import Submission, SubmissionKey

VOLUME = "/Volumes/main/ml/checkpoints"


def _key(**changes: object) -> SubmissionKey:
    fields: dict[str, object] = {
        "orchestrator": "airflow",
        "namespace": "prod",
        "pipeline": "sweep",
        "run": "manual__2026-12-05T07:00:00+00:00",
        "task": "train",
        "index": None,
    }
    fields.update(changes)
    return SubmissionKey(**fields)  # type: ignore[arg-type]


def test_a_folder_per_logical_task() -> None:
    folder = _key().checkpoints().folder(VOLUME)
    assert folder.startswith(
        f"{VOLUME}/airo-checkpoints/sweep/manual__2026-12-05T07_00_00_00_00/train--"
    )
    # Every attempt of the task: the same key, the same folder.
    assert _key().checkpoints().folder(VOLUME) == folder
    others = [
        _key(index="lr=0.1").checkpoints().folder(VOLUME),  # two partitions of one sweep
        _key(index="lr=0.01").checkpoints().folder(VOLUME),
        _key(index=3).checkpoints().folder(VOLUME),  # a map index
        _key(pipeline="other_dag").checkpoints().folder(VOLUME),  # another Dag, same task id
        _key(namespace="staging").checkpoints().folder(VOLUME),  # another deployment
        _key(run="manual__2026-12-06T07:00:00+00:00").checkpoints().folder(VOLUME),
        _key().checkpoints(None, "1").folder(VOLUME),  # a cleared group: start again
        # Names that clean to the same text still differ by their digest.
        _key(pipeline="sweep!").checkpoints().folder(VOLUME),
    ]
    assert len({folder, *others}) == len(others) + 1


@pytest.mark.parametrize("volume", ["main.ml.checkpoints", "/Volumes/main/ml", "/tmp/ckpt"])
def test_a_volume_that_is_not_one_is_refused_with_the_fix(volume: str) -> None:
    with pytest.raises(ConfigurationError, match="use /Volumes/<catalog>/<schema>/<volume>"):
        Submission(_key(), checkpoint_volume=volume)


JOB = """experiment_name: ckpt
compute: {accelerator_type: GPU_1xA10, num_accelerators: 1}
max_retries: 0
command: |
  echo "dir=$AIRO_CHECKPOINT_DIR"
  ls -A "$AIRO_CHECKPOINT_DIR"
"""


def test_the_ranks_find_their_folder_made(workspace_factory, tmp_path: Path) -> None:
    ws = workspace_factory()
    submission = Submission(_key(orchestrator="dagster"), checkpoint_volume=VOLUME)
    with AirClient(ws.host, ws.token) as client:
        run = submission.submit(client, load_workload(JOB), 0)
        state: RunState = client.wait(run.run_id, timeout=120, poll_interval=0.2)
        assert state.result_state == "SUCCESS", state.describe()
        text = "\n".join(record.body for record in client.iter_logs(run.run_id))
    folder = _key(orchestrator="dagster").checkpoints().folder(VOLUME)
    local = ws.data_dir / "volumes" / folder.removeprefix("/Volumes/")
    assert f"dir={local}" in text, text
    assert ".airo-checkpoint.json" in text  # the marker the submit made first


def test_a_missing_volume_is_refused_before_anything_is_submitted(workspace_factory) -> None:
    ws = workspace_factory(volumes=["main.ml.checkpoints"])
    submission = Submission(_key(), checkpoint_volume="/Volumes/main/ml/nowhere")
    ws.admin.reset_counters()
    with AirClient(ws.host, ws.token) as client, pytest.raises(ConfigurationError) as refused:
        submission.submit(client, load_workload(JOB), 0)
    message = str(refused.value)
    assert message.startswith(
        "checkpoint_volume /Volumes/main/ml/nowhere does not exist: nothing was submitted. "
        "Create it (CREATE VOLUME <catalog>.<schema>.<volume>)"
    ), message
    requests = ws.admin.counters()["requests"]
    assert not any("submit" in path or "import" in path for path in requests), requests
    assert ws.admin.counters().get("runs_created", 0) == 0
