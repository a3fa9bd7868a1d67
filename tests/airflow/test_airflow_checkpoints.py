"""A checkpoint folder per logical task, in Airflow (real ``dag.test()`` runs against the
local workspace): a trainer that checkpoints every 10 steps and loses its node at step 73
resumes at step 70 on the platform's retry and on an Airflow clear of the task (a clear after
a code change starts again), and a task of the same id in another Dag never shares its folder. Steps are counted by what the
trainer writes. The Dags: dag_files/air_test_checkpoints.py."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from airflow_runs import clear_task, load_test_dag, run_next_try, task_states, xcom
from conftest import connection_json
from test_airflow_workflow_repair import clear_with_downstream, run_dag_run

from air_runtime import AirClient

DAG_FILE = "air_test_checkpoints.py"


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


class NodeLoss:
    """Takes the node of each task's first execution away once it reaches step 73."""

    def __init__(self, workspace, folder: Path, tasks: tuple[str, ...]) -> None:
        self.workspace, self.folder, self.tasks = workspace, folder, tasks
        self.lost: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> NodeLoss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        with AirClient(self.workspace.host, self.workspace.token) as client:
            while not self._stop.is_set():
                for task in self.tasks:
                    if task not in self.lost and (self.folder / f"{task}.at73").exists():
                        # dag.test() runs one task at a time: the active run is this one's.
                        for run in client.list_runs(active_only=True)[0]:
                            self.workspace.admin.lose_node(run.run_id, 0)
                            self.lost.append(task)
                time.sleep(0.05)


def test_a_lost_node_resumes_from_the_last_checkpoint(workspace, task_log, tmp_path):
    dag = load_test_dag("air_test_checkpoints", DAG_FILE)
    with NodeLoss(workspace, tmp_path, ("platform_retry", "cleared")) as loss:
        dag_run = dag.test(run_conf={"dir": str(tmp_path)})
        assert sorted(loss.lost) == ["cleared", "platform_retry"]
        states = task_states(dag_run)
        assert states == {"platform_retry": "success", "cleared": "failed"}, task_log.text()
        # The platform's retry (one Airflow try) resumed at step 70, not 0.
        assert _lines(tmp_path / "platform_retry.starts") == ["0", "70"]
        assert len(_lines(tmp_path / "platform_retry.steps")) == 73 + 30
        # An Airflow clear of the failed task: a new run, the same folder, step 70.
        clear_task(dag.dag_id, dag_run.run_id, "cleared")
        state = run_next_try(dag, dag_run.run_id, "cleared")
        assert state == "success", task_log.text()
    assert _lines(tmp_path / "cleared.starts") == ["0", "70"]
    assert len(_lines(tmp_path / "cleared.steps")) == 73 + 30
    # The platform's retry says where it resumes; it runs with the variables of the run.
    text = task_log.text()
    assert (
        "node lost on node 0 (infrastructure): retry 1 of 1 resumes from checkpoint step 70" in text
    )
    assert _lines(tmp_path / "platform_retry.resume") == ["resuming=0 step= run="] * 2
    # The clear's new run knows it resumes, from which step and which run.
    first_run = xcom(dag.dag_id, dag_run.run_id, "platform_retry", "run_id")
    resumed = _lines(tmp_path / "cleared.resume")
    assert resumed[0] == "resuming=0 step= run=" and resumed[1].startswith(
        "resuming=1 step=70 run="
    )
    assert resumed[1] != f"resuming=1 step=70 run={first_run}"  # its own task's run, not another
    # Where the next run would resume: the newest checkpoint, in the log and as an XCom.
    newest = xcom(dag.dag_id, dag_run.run_id, "cleared", "checkpoint")
    assert newest["step"] == 100 and newest["name"] == "step-100", newest
    dirs = _lines(tmp_path / "cleared.dirs")
    assert len(dirs) == 2 and dirs[0] == dirs[1]
    # Each task its own folder; the task says where it is (XCom and log), as the platform
    # names it (the ranks of the local workspace see its folder of that path).
    assert set(_lines(tmp_path / "platform_retry.dirs")).isdisjoint(dirs)
    shown = xcom(dag.dag_id, dag_run.run_id, "cleared", "checkpoint_dir")
    assert shown.startswith("/Volumes/main/ml/checkpoints/airo-checkpoints/air_test_checkpoints/")
    assert dirs[0].endswith(shown.removeprefix("/Volumes")), (dirs[0], shown)
    assert f"Checkpoints of this task: {shown}" in task_log.text()
    assert f"Newest checkpoint of this task: step 100 ({shown}/step-100)" in task_log.text()
    assert newest["path"] == f"{shown}/step-100"
    # New code (here: the operator's code version) starts a new folder, at step 0.
    dag.task_dict["cleared"].checkpoint_code_version = "trainer-v2"
    clear_task(dag.dag_id, dag_run.run_id, "cleared")
    assert run_next_try(dag, dag_run.run_id, "cleared") == "success", task_log.text()
    assert _lines(tmp_path / "cleared.starts") == ["0", "70", "0"]
    assert _lines(tmp_path / "cleared.dirs")[2] != dirs[0]


def test_a_task_of_the_same_id_in_another_dag_has_its_own_folder(workspace, tmp_path):
    twin_dir = tmp_path / "twin"
    twin_dir.mkdir()
    one = tmp_path / "one"
    one.mkdir()
    for dag_id, folder in (("air_test_checkpoints_twin", twin_dir), ("air_test_checkpoints", one)):
        dag = load_test_dag(dag_id, DAG_FILE)
        # The first execution would wait at step 73: mark it passed.
        (folder / "platform_retry.at73").touch()
        (folder / "cleared.at73").touch()
        dag_run = dag.test(run_conf={"dir": str(folder)})
        assert task_states(dag_run)["platform_retry"] == "success"
    twin, first = _lines(twin_dir / "platform_retry.dirs"), _lines(one / "platform_retry.dirs")
    assert len(twin) == 1 and len(first) == 1 and twin != first
    assert "air_test_checkpoints_twin" in twin[0] and "/air_test_checkpoints/" in first[0]


def test_a_repaired_stage_resumes_and_a_cleared_group_starts_again(
    workspace, task_log, tmp_path, monkeypatch
):
    conn = json.loads(connection_json(workspace.host, workspace.token))
    conn["extra"] = {"checkpoint_volume": "/Volumes/main/ml/checkpoints"}
    monkeypatch.setenv("AIRFLOW_CONN_DATABRICKS_DEFAULT", json.dumps(conn))
    dag = load_test_dag("air_test_checkpoints_workflow", DAG_FILE)
    with NodeLoss(workspace, tmp_path, ("pipeline.submit",)):  # rendered by the submit task
        dag_run = dag.test(run_conf={"dir": str(tmp_path)})
    assert task_states(dag_run) == {"pipeline.submit": "success", "pipeline.train": "failed"}
    # Clearing the failed stage repairs the run: the same folder, step 70.
    clear_with_downstream(dag.dag_id, dag_run.run_id, "pipeline.train")
    assert run_dag_run(dag, dag_run.run_id) == "success", task_log.text()
    assert _lines(tmp_path / "pipeline.submit.starts") == ["0", "70"]
    # Clearing the group's submit task asks for everything again: a new folder, step 0.
    clear_with_downstream(dag.dag_id, dag_run.run_id, "pipeline.submit")
    assert run_dag_run(dag, dag_run.run_id) == "success", task_log.text()
    assert _lines(tmp_path / "pipeline.submit.starts") == ["0", "70", "0"]
    dirs = _lines(tmp_path / "pipeline.submit.dirs")
    assert dirs[0] == dirs[1] != dirs[2]
    assert "Checkpoints of stage train: /Volumes/main/ml/checkpoints/" in task_log.text()
