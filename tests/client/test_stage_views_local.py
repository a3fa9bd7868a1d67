"""``airo get`` and ``airo list`` on a multi-task run whose stages log to different experiments:
each task's experiment (never the first stage's for the whole run), and the run's name in
``airo list``'s own column, against the local workspace."""

from __future__ import annotations

import json

from air_runtime import AirClient, load_workload
from air_runtime.cli import main as airo
from air_runtime.plan import Stage


def _workload(name: str):
    return load_workload(
        {
            "experiment_name": name,
            "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
            "command": "echo ok",
        }
    )


def test_each_stage_shows_its_experiment_and_the_list_its_name(workspace_factory, capsys) -> None:
    ws = workspace_factory()
    stages = [
        Stage("train", _workload("nightly_train")),
        Stage("evaluate", _workload("nightly_eval"), ("train",)),
    ]
    with AirClient(ws.host, ws.token) as client:
        run_id = client.submit_workload(stages, run_name="nightly_pipe").run_id
        assert client.wait(run_id).is_success
    workspace = ["--host", ws.host, "--token", ws.token]
    capsys.readouterr()

    assert airo(["get", str(run_id), "--json", *workspace]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["experiment_name"] == "nightly_train, nightly_eval"
    assert {t["task_key"]: t["experiment_name"] for t in got["tasks"]} == {
        "train": "nightly_train",
        "evaluate": "nightly_eval",
    }
    assert airo(["get", str(run_id), *workspace]) == 0
    table = capsys.readouterr().out
    assert "Experiment" in table.splitlines()[table.splitlines().index("") + 1]
    rows = {
        line.split()[0]: line
        for line in table.splitlines()
        if line.startswith(("train", "evaluate"))
    }
    assert "nightly_train" in rows["train"].split() and "nightly_eval" not in rows["train"]
    assert "nightly_eval" in rows["evaluate"].split()

    assert airo(["list", "--all-status", *workspace]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert listing[0].rstrip().endswith("Name")
    (row,) = [line for line in listing if line.startswith(str(run_id))]
    assert row.rstrip().endswith("nightly_pipe")
    # Found by either stage's experiment.
    for pattern in ("nightly_eval", "nightly_tr*"):
        assert (
            airo(
                ["list", "--all-status", "--json", "--filter", f"experiment={pattern}", *workspace]
            )
            == 0
        )
        assert [int(r["run_id"]) for r in json.loads(capsys.readouterr().out)["runs"]] == [run_id]
