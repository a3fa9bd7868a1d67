"""Runs say whose they are: each trial of a mapped sweep is named after its Dag, task and map
index, and its ranks get the orchestrator's ids as variables. The Dag:
dag_files/air_test_run_identity.py."""

from __future__ import annotations

import json

from airflow.models.xcom import XComModel
from airflow.utils.session import create_session
from airflow_runs import load_test_dag, task_states
from sqlalchemy import select

from air_runtime import AirClient
from air_runtime._submission import short_run
from air_runtime.cli import main as airo

DAG_ID = "air_test_run_identity"


def _env(path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def _run_ids(run_id: str) -> dict[int, int]:
    with create_session() as session:
        rows = session.scalars(
            select(XComModel).where(
                XComModel.dag_id == DAG_ID,
                XComModel.run_id == run_id,
                XComModel.task_id == "trial",
                XComModel.key == "run_id",
            )
        ).all()
        return {row.map_index: int(XComModel.deserialize_value(row)) for row in rows}


def test_a_mapped_trial_names_its_run_and_tells_its_ranks(
    workspace, task_log, tmp_path, monkeypatch, capsys
):
    dag_run = load_test_dag(DAG_ID, "air_test_run_identity.py").test(
        run_conf={"out_dir": str(tmp_path)}
    )
    assert task_states(dag_run) == {"trial": "success"}, task_log.text()
    runs = _run_ids(dag_run.run_id)
    assert sorted(runs) == [0, 1]
    with AirClient(workspace.host, workspace.token) as client:
        for index, run_id in runs.items():
            night = short_run(dag_run.run_id)  # each Dag run names its runs apart
            assert client.get_run(run_id).run_name == (
                f"identity_sweep--{DAG_ID}--{night}--trial--{index}"
            )
    for index in (0, 1):
        env = _env(tmp_path / f"env_{index}")
        assert env["AIRO_ORCHESTRATOR"] == "airflow"
        assert env["AIRO_PIPELINE"] == DAG_ID
        assert env["AIRO_TASK"] == "trial"
        assert env["AIRO_MAP_INDEX"] == str(index)
        assert env["AIRO_ORCHESTRATOR_RUN_ID"] == dag_run.run_id
        assert "AIRO_PARTITION_KEY" not in env
        assert env["LR"] == ("0.1", "0.01")[index]  # the trial's own variables are kept

    # airo get shows the name; airo list finds the trial by it.
    monkeypatch.setenv("DATABRICKS_HOST", workspace.host)
    monkeypatch.setenv("DATABRICKS_TOKEN", workspace.token)
    capsys.readouterr()
    assert airo(["get", str(runs[1])]) == 0
    night = short_run(dag_run.run_id)
    assert f"Run name:      identity_sweep--{DAG_ID}--{night}--trial--1" in capsys.readouterr().out
    assert airo(["list", "--all-status", "--json", "--filter", "name=*--trial--1"]) == 0
    listed = json.loads(capsys.readouterr().out)["runs"]
    assert [int(r["run_id"]) for r in listed] == [runs[1]]
