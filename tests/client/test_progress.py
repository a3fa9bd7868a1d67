"""Training progress and time left as the CLI computes them (databricks/cli cmd/air/eta.go),
and shown by `airo get` / `airo list` for a rank that logs with the real `mlflow` client."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest
from mlflow_ranks import progress_command

from air_runtime import AirClient, RunState, TrainingProgress, compute_progress
from air_runtime._progress import MetricPoint, coarse_duration
from air_runtime.cli import main as airo


def _point(ms: int, step: int, epoch: float) -> MetricPoint:
    return MetricPoint(value=epoch, step=step, timestamp=ms)


def test_steps_win_over_epochs_and_the_rate_is_the_windows():
    # 4000 steps in 100 s: 40 steps/s, 5000 left -> 125 s; step 5000 of 10000 -> 50%.
    progress = compute_progress(
        {"max_steps": "10000", "num_train_epochs": "3"},
        [_point(0, 1000, 0.3), _point(100_000, 5000, 1.5)],
    )
    assert progress == TrainingProgress(percent_complete=50, remaining_seconds=125)
    assert progress.detailed() == "50% · ~2m left"
    assert progress.compact() == "50% · ~2m"
    assert progress.to_dict() == {"est_remaining_seconds": 125, "est_percent_complete": 50}


def test_epochs_drive_it_when_max_steps_is_not_positive():
    # Trainer logs max_steps=-1 when it trains by epochs: 1 epoch in 90 s, 1.5 of 3 left.
    progress = compute_progress(
        {"max_steps": "-1", "num_train_epochs": "3"},
        [_point(0, 100, 0.5), _point(90_000, 900, 1.5)],
    )
    assert progress == TrainingProgress(percent_complete=50, remaining_seconds=135)


def test_only_the_last_ten_points_count_and_halves_round_up():
    points = [_point(0, 0, 0), _point(100_000, 10, 0.1)]
    points += [_point(100_000 + i * 10_000, 10 + i * 100, 0.1 + i / 10) for i in range(1, 11)]
    progress = compute_progress({"max_steps": "2000"}, points)
    # 10 steps/s over the window, step 1010: 990 left -> 99 s; 50.5% -> 51 (Go's math.Round).
    assert progress == TrainingProgress(percent_complete=51, remaining_seconds=99)


@pytest.mark.parametrize(
    ("params", "points"),
    [
        ({}, None),
        ({"max_steps": "-1"}, None),
        ({"num_train_epochs": "0"}, None),
        ({"max_steps": "lots"}, None),
        ({"max_steps": "10000"}, [_point(0, 100, 0.3)]),
        ({"max_steps": "10000"}, [_point(0, 2, 0.01), _point(30_000, 8, 0.02)]),  # warming up
        ({"max_steps": "10000"}, [_point(500, 100, 0.3), _point(500, 5000, 1.5)]),  # no time
        ({"max_steps": "5000"}, None),  # already at the total
        ({"num_train_epochs": "1.5"}, None),
        ({"max_steps": "10000"}, [_point(0, 5000, 1.5), _point(100_000, 5000, 1.5)]),
    ],
)
def test_no_estimate(params, points):
    base = [_point(0, 100, 0.3), _point(100_000, 5000, 1.5)]
    assert compute_progress(params, points if points is not None else base) is None


def test_never_100_percent_while_running():
    progress = compute_progress(
        {"max_steps": "1000"}, [_point(0, 900, 0.9), _point(10_000, 999, 0.999)]
    )
    assert progress is not None and progress.percent_complete == 99


def test_live_progress_starts_from_the_first_logged_step():
    # What a waiter logs: no step-10 wait; one point gives the percentage alone, two the
    # time left (epoch 2 of 12 at step 2, one epoch in 5 s: 10 left -> 50 s).
    params = {"num_train_epochs": "12"}
    one, two = _point(0, 1, 1.0), _point(5_000, 2, 2.0)
    assert compute_progress(params, [one]) is None  # the CLI's rules (airo get)
    assert compute_progress(params, [one, two]) is None  # before step 10
    assert compute_progress(params, [one], live=True) == TrainingProgress(8, None)
    assert compute_progress(params, [one], live=True).detailed() == (
        "8% · time left after the next logged step"
    )
    assert compute_progress(params, [one], live=True).compact() == "8%"
    assert compute_progress(params, [one, two], live=True) == TrainingProgress(17, 50)
    assert compute_progress({}, [one, two], live=True) is None  # still no total, no estimate
    assert compute_progress(params, [_point(0, 12, 12.0)], live=True) is None  # at the total


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "<1m"), (20, "<1m"), (30, "1m"), (80, "1m"), (125, "2m"), (3600, "1h"), (8100, "2h 15m")],
)
def test_coarse_duration(seconds, text):
    assert coarse_duration(seconds) == text


# The workload of a rank logging progress through the mlflow client (tests/mlflow_ranks.py).
TRAINING = """experiment_name: cli-progress
compute: {accelerator_type: GPU_1xA10, num_accelerators: 1}
max_retries: 0
command: |
"""


def _training_yaml(release: Path) -> str:
    return TRAINING + textwrap.indent(progress_command(release), "  ")


def _auth(ws, tmp_path: Path) -> list[str]:
    token_file = tmp_path / "token"
    token_file.write_text(ws.token)
    token_file.chmod(0o600)
    return ["--host", ws.host, "--token-file", str(token_file)]


def _wait_for_line(client: AirClient, run_id: int, text: str) -> None:
    """Until the run's log shows ``text`` (the event), failing if the run ends first."""
    while True:
        state = client.get_run(run_id)
        if any(text in r.body for r in client.iter_run_logs(run_id)):
            return
        assert not state.is_terminal, state.describe()
        time.sleep(0.05)


def test_airo_get_and_list_show_the_progress_a_rank_logs(workspace_factory, tmp_path: Path, capsys):
    pytest.importorskip("mlflow")
    ws = workspace_factory()
    auth = _auth(ws, tmp_path)
    release = tmp_path / "release"
    job = tmp_path / "job.yaml"
    job.write_text(_training_yaml(release))
    assert airo(["run", str(job), *auth]) == 0
    run_id = int(capsys.readouterr().out.split()[1].rstrip(":"))
    try:
        with AirClient(ws.host, ws.token) as client:
            _wait_for_line(client, run_id, "logged progress")
            assert client.training_progress(run_id) == TrainingProgress(10, 90)
            state = client.get_run(run_id)
            assert client.training_progress(state) == TrainingProgress(10, 90)
            listed = RunState(run_id, state.life_cycle_state)  # as runs/list has it: no tasks
            assert client.training_progress(listed) == TrainingProgress(10, 90)

        assert airo(["get", str(run_id), "--json", *auth]) == 0
        got = json.loads(capsys.readouterr().out)
        assert (got["est_percent_complete"], got["est_remaining_seconds"]) == (10, 90)
        assert airo(["get", str(run_id), *auth]) == 0
        assert "Progress:      10% · ~2m left" in capsys.readouterr().out
        assert airo(["list", *auth]) == 0
        row = [line for line in capsys.readouterr().out.splitlines() if str(run_id) in line]
        assert len(row) == 1 and "10% · ~2m" in row[0]
    finally:
        release.touch()
    with AirClient(ws.host, ws.token) as client:
        ended = client.wait(run_id, poll_interval=0.1)
        assert ended.is_success, ended.describe()
        assert client.training_progress(ended) is None  # an ended run shows none
        # The rank's MLflow client found its credentials through the SDK's default auth:
        # no "Failed to create databricks SDK workspace client ... legacy authentication".
        lines = [record.body for record in client.read_logs(run_id)]
        assert "logged progress" in lines
        assert not [line for line in lines if "WARNING" in line or "legacy auth" in line]
    assert airo(["get", str(run_id), "--json", *auth]) == 0
    assert json.loads(capsys.readouterr().out)["est_percent_complete"] is None


def test_airo_get_shows_each_running_tasks_progress(workspace_factory, tmp_path: Path, capsys):
    pytest.importorskip("mlflow")
    import httpx

    from tests.local_workspace.conftest import Workloads

    ws = workspace_factory()
    auth = _auth(ws, tmp_path)
    release = tmp_path / "release"
    logging = progress_command(release)
    idle = f"while [ ! -e {release} ]; do sleep 0.05; done\n"
    with httpx.Client(
        base_url=ws.host, headers={"Authorization": f"Bearer {ws.token}"}, timeout=30
    ) as api:
        workloads = Workloads(ws, api)
        run_id = workloads.submit(
            workloads.command_task(logging, key="train"),
            workloads.command_task(idle, key="idle"),
        )
    try:
        with AirClient(ws.host, ws.token) as client:
            _wait_for_line(client, run_id, "logged progress")
            assert client.training_progress(run_id, "train") == TrainingProgress(10, 90)
            assert client.training_progress(run_id, "idle") is None
            assert client.training_progress(run_id) is None  # which task? none is guessed
        assert airo(["get", str(run_id), "--json", *auth]) == 0
        tasks = {t["task_key"]: t for t in json.loads(capsys.readouterr().out)["tasks"]}
        assert (
            tasks["train"]["est_percent_complete"],
            tasks["train"]["est_remaining_seconds"],
        ) == (
            10,
            90,
        )
        assert tasks["idle"]["est_percent_complete"] is None
        assert airo(["get", str(run_id), *auth]) == 0
        row = next(
            line for line in capsys.readouterr().out.splitlines() if line.startswith("train")
        )
        assert row.endswith("10% · ~2m")
    finally:
        release.touch()
