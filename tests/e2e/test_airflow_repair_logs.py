"""What the on-call engineer reads after recovering a workflow stage on a real deployment
(LocalExecutor on PostgreSQL, scheduler, triggerer, DAG processor and API server as separate
processes): train fails twice and is recovered, by clearing it twice (the UI's "Clear" with
"Downstream", through the REST API) or by ``retries=2``. Every recovery is a repair of the one
run, whose re-run of train is a task run of its own.

Each try's task log, read through Airflow's log API as the UI reads it, holds its own attempt's
lines and only those: every line the rank printed (numbered, the ``done`` line included), each
once. ``evaluate``'s log holds its lines. ``airo logs --download-to`` writes a folder for every
task run of the repairs. The Dags: dags_repair_logs/air_repair_logs.py."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from airflow_deployment import E2E_DIR, AirflowDeployment, add_airflow_connections
from managed_process import own_database

from air_runtime.cli import main as airo

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

LINES = 15
TRIES = 3  # two that fail, one that succeeds
CLEAR, RETRIES = "air_repair_logs_clear", "air_repair_logs_retries"


def printed(stage: str, k: int) -> list[str]:
    """What try ``k`` of ``stage`` printed, in order."""
    return [f"{stage} try {k} line {i}" for i in range(1, LINES + 1)] + [f"{stage} try {k} done"]


def try_log(deployment: AirflowDeployment, dag_id: str, run_id: str, task_id: str, n: int) -> str:
    """Try ``n``'s log of a task instance, as Airflow's log API serves it to the UI."""
    body: dict[str, Any] = deployment.api(
        "GET",
        f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{n}",
        params={"full_content": "true"},
    )
    return "\n".join(
        str(e.get("event", "")) if isinstance(e, dict) else str(e) for e in body["content"]
    )


def try_log_holding(
    deployment: AirflowDeployment, dag_id: str, run_id: str, task_id: str, n: int, text: str
) -> str:
    """``try_log`` once it holds ``text`` (bounded: the triggerer writes a trigger's lines from
    its own process, so a try can have ended before its last line is in the log; the caller's
    assertion then shows the log)."""
    deadline = time.monotonic() + 60
    log = try_log(deployment, dag_id, run_id, task_id, n)
    while text not in log and time.monotonic() < deadline:
        time.sleep(0.2)
        log = try_log(deployment, dag_id, run_id, task_id, n)
    return log


def node_lines(log: str, stage: str) -> list[str]:
    """The node lines of ``stage`` a task log holds (``[<stage> node N attempt A] <line>``,
    stamped or not), in order."""
    found = []
    for line in log.splitlines():
        mark = line.find(f"[{stage} node ")
        if mark >= 0 and "] " in line[mark:]:
            found.append(line[mark:].split("] ", 1)[1])
    return found


def assert_own_lines_once(log: str, stage: str, k: int) -> None:
    shown = [x for x in node_lines(log, stage) if x.startswith(f"{stage} try ")]
    assert shown == printed(stage, k), f"try {k} of {stage}:\n{log[-4000:]}"


def check_recovered_run(
    deployment: AirflowDeployment, workspace: Any, dag_id: str, run_id: str, tmp_path: Path
) -> None:
    run = deployment.xcom(dag_id, run_id, "pipeline.submit", "run_id")
    for stage in ("prep", "train", "evaluate"):
        assert deployment.xcom(dag_id, run_id, f"pipeline.{stage}", "run_id") == run, stage

    # Each try of train: its own attempt's lines, all of them, once, in order.
    ti = deployment.task_instance(dag_id, run_id, "pipeline.train")
    assert int(ti["try_number"]) == TRIES, ti
    for k in range(1, TRIES + 1):
        log = try_log_holding(
            deployment, dag_id, run_id, "pipeline.train", k, f"train try {k} done"
        )
        assert_own_lines_once(log, "train", k)
        if k > 1:
            assert f"repairing run {run}: re-running train, evaluate" in log, log[-3000:]

    # evaluate ran once, in the second repair: its try's log holds its lines.
    ti = deployment.task_instance(dag_id, run_id, "pipeline.evaluate")
    last = int(ti["try_number"])
    log = try_log_holding(
        deployment, dag_id, run_id, "pipeline.evaluate", last, "evaluate try 1 done"
    )
    assert_own_lines_once(log, "evaluate", 1)

    # airo logs --download-to: a folder for every task run, the repairs' included.
    target = tmp_path / f"downloaded_{dag_id}"
    workspace_args = ["--host", workspace.host, "--token", workspace.token]
    assert airo(["logs", str(run), "--download-to", str(target), *workspace_args]) == 0
    for attempt in range(TRIES):
        path = target / "logs" / "train" / f"attempt_{attempt}" / "node_0.log"
        lines = [x for x in path.read_text().splitlines() if x.startswith("train try ")]
        assert lines == printed("train", attempt + 1), path
    # evaluate: skipped in the original run and the first repair, run in the second.
    evaluate = target / "logs" / "evaluate" / "attempt_2" / "node_0.log"
    assert [x for x in evaluate.read_text().splitlines()] == printed("evaluate", 1)
    assert sorted(p.name for p in (target / "logs" / "evaluate").iterdir()) == ["attempt_2"]


def clear_with_downstream(
    deployment: AirflowDeployment, dag_id: str, run_id: str, task_id: str
) -> None:
    """What the UI's "Clear" on a failed stage with "Downstream" sends."""
    deployment.api(
        "POST",
        f"/dags/{dag_id}/clearTaskInstances",
        json={
            "dry_run": False,
            "dag_run_id": run_id,
            "task_ids": [task_id],
            "include_downstream": True,
            "include_upstream": False,
            "only_failed": False,
            "reset_dag_runs": True,
        },
    )


def test_each_try_of_a_repaired_stage_logs_its_own_attempt(
    tmp_path: Path, postgres: str, local_workspace, workspace_client, capsys
) -> None:
    deployment = AirflowDeployment(
        tmp_path,
        executor="LocalExecutor",
        database_dsn=own_database(postgres, "airo_airflow_repair_logs"),
        dag_folders={"e2e": E2E_DIR / "dags_repair_logs"},
    )
    try:
        deployment.migrate()
        deployment.start()
        add_airflow_connections(deployment, local_workspace)
        deployment.wait_for_dags([CLEAR, RETRIES])
        folders = {dag_id: tmp_path / dag_id for dag_id in (CLEAR, RETRIES)}
        runs = {}
        for dag_id, folder in folders.items():
            folder.mkdir()
            runs[dag_id] = deployment.trigger(dag_id, {"dir": str(folder)})

        # Cleared twice: each clear once the try before has failed.
        for _ in range(TRIES - 1):
            states = deployment.wait_for_runs([(CLEAR, runs[CLEAR])], timeout=240)
            assert states[(CLEAR, runs[CLEAR])]["state"] == "failed", deployment.diagnose(
                [(CLEAR, runs[CLEAR])]
            )
            clear_with_downstream(deployment, CLEAR, runs[CLEAR], "pipeline.train")
        states = deployment.wait_for_runs(list(runs.items()), timeout=300)
        assert {k: v["state"] for k, v in states.items()} == {
            run: "success" for run in runs.items()
        }, deployment.diagnose(list(runs.items()))
        for folder in folders.values():
            # The ranks' own count: train three times, prep and evaluate once.
            counts = {s: (folder / s).read_text().strip() for s in ("prep", "train", "evaluate")}
            assert counts == {"prep": "1", "train": str(TRIES), "evaluate": "1"}
        assert local_workspace.admin.counters()["runs_created"] == 2  # one run per Dag run

        capsys.readouterr()
        for dag_id, run_id in runs.items():
            check_recovered_run(deployment, local_workspace, dag_id, run_id, tmp_path)

        # airo logs --task train --retry 1: the first repair's task run.
        run = deployment.xcom(CLEAR, runs[CLEAR], "pipeline.submit", "run_id")
        workspace_args = ["--host", local_workspace.host, "--token", local_workspace.token]
        capsys.readouterr()
        assert airo(["logs", str(run), "--task", "train", "--retry", "1", *workspace_args]) == 0
        out = capsys.readouterr().out
        assert [x for x in node_lines(out, "train") if x.startswith("train try")] == printed(
            "train", 2
        )
        assert "[train node 0 attempt 1 (repair 1)]" in out
        assert airo(["logs", str(run), "--json", "--task", "evaluate", *workspace_args]) == 0
        lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
        assert [x["line"] for x in lines if x["line"].startswith("evaluate try")] == printed(
            "evaluate", 1
        )
    finally:
        deployment.stop()
