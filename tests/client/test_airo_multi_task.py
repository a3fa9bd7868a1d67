"""`airo get` and `airo list` on runs of several tasks, against the local workspace: the
accelerators counted across tasks (the most held at once), whole task keys."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx

from air_runtime import AirClient
from air_runtime.cli import main as airo
from tests.local_workspace.conftest import Workloads

# A partition range's task keys end with the partition: longer than the 27 characters the
# table used to keep.
RANGE_KEYS = ("nightly_sweep__train__2026-12-01", "nightly_sweep__train__2026-12-02")


def _auth(ws, tmp_path: Path) -> list[str]:
    token_file = tmp_path / "token"
    token_file.write_text(ws.token)
    token_file.chmod(0o600)
    return ["--host", ws.host, "--token-file", str(token_file)]


def _submit(ws, *tasks) -> int:
    with httpx.Client(
        base_url=ws.host, headers={"Authorization": f"Bearer {ws.token}"}, timeout=30
    ) as api:
        workloads = Workloads(ws, api)
        return workloads.submit(*(task(workloads) for task in tasks))


def _held(release: Path, key: str, **fields):
    command = f"while [ ! -e {release} ]; do sleep 0.05; done\n"
    return lambda workloads: workloads.command_task(command, key=key, **fields)


def _until_both_run(ws, run_id: int) -> None:
    """Until every task of the run is RUNNING (the event, not a time); fails if it ends."""
    with AirClient(ws.host, ws.token) as client:
        while True:
            state = client.get_run(run_id)
            if len(state.tasks) == len(RANGE_KEYS) and all(
                t.life_cycle_state == "RUNNING" for t in state.tasks
            ):
                return
            assert not state.is_terminal, state.describe()
            time.sleep(0.05)


def test_a_range_run_shows_the_accelerators_its_tasks_hold_at_once(
    workspace_factory, tmp_path: Path, capsys
):
    ws = workspace_factory()
    auth = _auth(ws, tmp_path)
    release = tmp_path / "release"
    side_by_side = _submit(ws, *(_held(release, key) for key in RANGE_KEYS))
    try:
        _until_both_run(ws, side_by_side)
        assert airo(["get", str(side_by_side), *auth]) == 0
        out = capsys.readouterr().out
        assert "Accelerators:  2x A10" in out, out
        for key in RANGE_KEYS:  # whole, and in a column as wide as the longest
            row = next(line for line in out.splitlines() if line.startswith(key))
            assert row.split()[0] == key, row
        assert airo(["get", str(side_by_side), "--json", *auth]) == 0
        got = json.loads(capsys.readouterr().out)
        assert (got["num_accelerators"], got["accelerators"]) == (2, {"GPU_1xA10": 2})
        assert airo(["list", *auth]) == 0
        row = next(
            line for line in capsys.readouterr().out.splitlines() if str(side_by_side) in line
        )
        assert " 2x A10 " in row, row
    finally:
        release.touch()
    with AirClient(ws.host, ws.token) as client:
        assert client.wait(side_by_side, poll_interval=0.1).is_success
    # Ended, it still says what it held at once.
    assert airo(["get", str(side_by_side), "--json", *auth]) == 0
    assert json.loads(capsys.readouterr().out)["accelerators"] == {"GPU_1xA10": 2}


def test_stages_one_after_another_hold_one_at_a_time(workspace_factory, tmp_path: Path, capsys):
    ws = workspace_factory()
    auth = _auth(ws, tmp_path)
    release = tmp_path / "release"
    release.touch()
    run_id = _submit(
        ws,
        _held(release, "prep"),
        _held(release, "train", depends_on=[{"task_key": "prep"}]),
        _held(release, "evaluate", depends_on=[{"task_key": "train"}]),
    )
    with AirClient(ws.host, ws.token) as client:
        assert client.wait(run_id, poll_interval=0.1).is_success
    assert airo(["get", str(run_id), "--json", *auth]) == 0
    got = json.loads(capsys.readouterr().out)
    assert (got["num_accelerators"], got["accelerators"]) == (1, {"GPU_1xA10": 1}), got
