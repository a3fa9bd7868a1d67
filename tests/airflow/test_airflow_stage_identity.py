"""A workflow's stages say who they are, and a repaired stage's try shows its own lines.

nightly.prep >> nightly.train >> nightly.evaluate as one run; train fails on its first try and
is cleared. Each stage's ranks get ``AIRO_TASK`` = the stage's own task id (not the group's
submit task), the run is named after the Dag run (each night's its own name), and the cleared
train's try logs the repair's lines only, complete, once. The Dag:
dag_files/air_test_stage_identity.py."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from airflow_runs import load_test_dag, task_states, xcom
from test_airflow_workflow_repair import clear_with_downstream, run_dag_run

from air_runtime import AirClient
from air_runtime._submission import short_run

DAG_ID = "air_test_stage_identity"
DAG_FILE = "air_test_stage_identity.py"
LINES = 5


def _env(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def _node_lines(events: list[dict], label: str) -> list[str]:
    """The node lines a task log holds under ``[label]``, in order."""
    found = []
    for event in events:
        text = str(event.get("event", ""))
        mark = f"[{label}] "
        if mark in text:
            found.append(text.split(mark, 1)[1])
    return found


def expected(stage: str, k: int) -> list[str]:
    return [f"{stage} try {k} line {i}" for i in range(1, LINES + 1)] + [f"{stage} try {k} done"]


def test_stages_name_themselves_and_a_repaired_try_logs_its_own_lines(
    workspace, task_log, tmp_path
):
    dag = load_test_dag(DAG_ID, DAG_FILE)
    dag_run = dag.test(run_conf={"dir": str(tmp_path)})
    assert task_states(dag_run) == {
        "nightly.submit": "success",
        "nightly.prep": "success",
        "nightly.train": "failed",
        "nightly.evaluate": "upstream_failed",
    }, task_log.text()
    run_id = xcom(DAG_ID, dag_run.run_id, "nightly.submit", "run_id")
    first_try = len(task_log.events)
    train_first = _node_lines(task_log.events, "train node 0 attempt 0")
    assert [x for x in train_first if "try" in x] == expected("train", 1)

    clear_with_downstream(DAG_ID, dag_run.run_id, "nightly.train")
    assert run_dag_run(dag, dag_run.run_id) == "success", task_log.text()

    # Each stage's ranks: its own task id; the Dag run they belong to; no map index.
    for stage, tries in (("prep", 1), ("train", 2), ("evaluate", 1)):
        env = _env(tmp_path / f"env_{stage}_{tries}")
        assert env["AIRO_TASK"] == f"nightly.{stage}", stage
        assert env["AIRO_STAGE"] == stage
        assert env["AIRO_ORCHESTRATOR_RUN_ID"] == dag_run.run_id
        assert "AIRO_MAP_INDEX" not in env
    # Named after the Dag run, in its short form.
    with AirClient(workspace.host, workspace.token) as client:
        name = client.get_run(run_id).run_name
    assert name == f"nightly_pipe--{DAG_ID}--{short_run(dag_run.run_id)}--nightly_submit"

    # The repaired tries' logs: the repair's train lines, complete and once; none of the
    # first try's; and evaluate's, which ran only in the repair.
    after = task_log.events[first_try:]
    repaired = _node_lines(after, "train node 0 attempt 1 (repair 1)")
    assert [x for x in repaired if "try" in x] == expected("train", 2), Counter(repaired)
    assert not [x for x in _node_lines(after, "train node 0 attempt 0") if "try" in x]
    evaluate = _node_lines(after, "evaluate node 0 attempt 1 (repair 1)")
    assert [x for x in evaluate if "try" in x] == expected("evaluate", 1)
