"""P11 (Airflow): GPU-hours paid / GPU-hours needed when one workflow stage fails once and is
recovered the way Airflow teaches.

The Dag (``benchmarks/p11_dags/p11_repair.py``): prep >> train >> evaluate as one
``AirWorkflowTaskGroup`` run, each stage on 8 accelerators for a fixed time, train running
out of GPU memory at the end of its first execution. It runs with ``dag.test()`` against a
local workspace; once the Dag run has failed, the recovery clears (through Airflow's own
clear, with downstream, as the UI's "Clear" does) either

- ``before``: the group's submit task, what users had to do (a fresh run of every stage);
- ``after``: the failed stage, ``train`` (a repair of the same run);

and runs the Dag run again until it succeeds. GPU-hours are counted by the ranks themselves:
each execution appends its start and end time to a file of its stage, and an execution holds
8 accelerators for its duration. *Needed* is what the failure itself costs plus one good
execution of each stage (the failed train execution cannot be saved; recovery should add
nothing to it), so 1.00x means recovery paid for nothing twice. Also reported: the GPU-hours
the stage tasks' ``gpu_hours`` XComs add up to (the platform's view, the failed attempt and
the repair included) and the runs the workspace created.

    python -m benchmarks.p11_airflow_repair [--quick]
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks._common import REPO, fmt, median, parser_for, write_result

DAG_FOLDER = REPO / "benchmarks" / "p11_dags"
STAGES = ("prep", "train", "evaluate")
ACCELERATORS = 8
TARGET = {"after_ratio_max": 1.0}
SIDES = {"before": "pipeline.submit", "after": "pipeline.train"}


def _airflow_env(home: Path) -> None:
    """Airflow for ``dag.test()`` in this process: SQLite metadata in ``home`` and the one Dag
    bundle of this benchmark (set before Airflow is imported)."""
    from cryptography.fernet import Fernet

    os.environ.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__CORE__FERNET_KEY": Fernet.generate_key().decode(),
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
            "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(
                [
                    {
                        "name": "p11",
                        "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
                        "kwargs": {"path": str(DAG_FOLDER)},
                    }
                ]
            ),
            "AIRFLOW__AIR__DEFAULT_POLL_INTERVAL": "0.2",
            "AIRFLOW__AIR__TRIGGER_FIRST_POLL_DELAY": "0.1",
        }
    )


def _load_dag() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("p11_repair_dag", DAG_FOLDER / "p11_repair.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def _clear_with_downstream(dag_id: str, run_id: str, task_id: str) -> None:
    """Airflow's clear of ``task_id`` and its downstream tasks (the REST API's
    clearTaskInstances, what the UI sends)."""
    from airflow.models.dagbag import DBDagBag
    from airflow.models.taskinstance import clear_task_instances
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState

    with create_session() as session:
        dag = DBDagBag().get_latest_version_of_dag(dag_id, session=session)
        assert dag is not None
        subset = dag.partial_subset(
            task_ids=[task_id], include_downstream=True, include_upstream=False
        )
        tis = dag.clear(
            dry_run=True, task_ids=list(subset.task_dict), run_id=run_id, session=session
        )
        clear_task_instances(list(tis), session, DagRunState.QUEUED)


def _run_dag_run(dag: Any, run_id: str) -> str:
    """The loop of ``dag.test()`` on an existing Dag run, until it ends; its state."""
    from airflow.models.dagbag import DBDagBag
    from airflow.models.dagrun import DagRun
    from airflow.sdk.definitions.dag import _run_task
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState, TaskInstanceState
    from sqlalchemy import select

    with create_session() as session:
        dag_run = session.scalars(
            select(DagRun).where(DagRun.dag_id == dag.dag_id, DagRun.run_id == run_id)
        ).one()
        dag_run.dag = DBDagBag().get_dag_for_run(dag_run, session=session)
        dag_run.state = DagRunState.RUNNING
        session.commit()
        while dag_run.state == DagRunState.RUNNING:
            session.expire_all()
            schedulable, _ = dag_run.update_state(session=session)
            for ti in schedulable:
                ti.try_number += 1
                ti.state = TaskInstanceState.SCHEDULED
            session.commit()
            for ti in dag_run.get_task_instances(session=session):
                if ti.state == TaskInstanceState.SCHEDULED:
                    with contextlib.suppress(Exception):  # a failed task is a state
                        _run_task(ti=ti, task=dag.task_dict[ti.task_id], run_triggerer=True)
        return str(getattr(dag_run.state, "value", dag_run.state))


def _xcom_gpu_hours(dag_id: str, run_id: str) -> float:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.scalars(
            select(XComModel).where(
                XComModel.dag_id == dag_id, XComModel.run_id == run_id, XComModel.key == "gpu_hours"
            )
        ).all()
        return sum(float(XComModel.deserialize_value(row) or 0) for row in rows)


def _executions(folder: Path) -> dict[str, list[tuple[float, bool]]]:
    """Per stage, each execution's accelerator-hours and whether it succeeded."""
    found: dict[str, list[tuple[float, bool]]] = {}
    for stage in STAGES:
        path = folder / stage
        lines = path.read_text().splitlines() if path.exists() else []
        found[stage] = [
            (ACCELERATORS * (int(end) - int(start)) / 1e9 / 3600, status == "ok")
            for start, end, status in (line.split() for line in lines)
        ]
    return found


def _trial(dag: Any, workspace: Any, side: str, folder: Path) -> dict[str, Any]:
    folder.mkdir(parents=True)
    runs_before = workspace.admin.counters()["runs_created"]
    dag_run = dag.test(run_conf={"dir": str(folder)})
    failed = str(getattr(dag_run.state, "value", dag_run.state))
    _clear_with_downstream(dag.dag_id, dag_run.run_id, SIDES[side])
    final = _run_dag_run(dag, dag_run.run_id)
    executions = _executions(folder)
    paid = sum(h for runs in executions.values() for h, _ in runs)
    failures = sum(h for runs in executions.values() for h, ok in runs if not ok)
    good_once = sum(next((h for h, ok in runs if ok), 0.0) for runs in executions.values())
    needed = failures + good_once
    return {
        "first_dag_run": failed,
        "final_dag_run": final,
        "executions": {stage: len(runs) for stage, runs in executions.items()},
        "gpu_hours_paid": round(paid, 6),
        "gpu_hours_needed": round(needed, 6),
        "gpu_hours_without_failure": round(good_once, 6),
        "ratio": paid / needed if needed else float("nan"),
        "ratio_to_no_failure": paid / good_once if good_once else float("nan"),
        "paid_twice_share": (paid - needed) / paid if paid else float("nan"),
        "xcom_gpu_hours": round(_xcom_gpu_hours(dag.dag_id, dag_run.run_id), 6),
        "runs_created": workspace.admin.counters()["runs_created"] - runs_before,
    }


def measure(*, quick: bool) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="airo-bench-p11-"))
    _airflow_env(root / "airflow")
    from airflow.utils.db import initdb

    from air_runtime.local import start_local_workspace

    initdb()
    trials = 1 if quick else 3
    results: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    workspace = start_local_workspace(data_dir=root / "workspace", retry_interval_s=0.05)
    try:
        os.environ["AIRFLOW_CONN_DATABRICKS_DEFAULT"] = json.dumps(
            {"conn_type": "databricks", "host": workspace.host, "password": workspace.token}
        )
        dag = _load_dag()
        for index in range(trials):
            for side in SIDES:  # alternating, so both see the same machine
                trial = _trial(dag, workspace, side, root / f"{side}-{index}")
                print(f"P11 {side} trial {index + 1}: {fmt(trial['ratio'], 3)}x", flush=True)
                results[side].append(trial)
    finally:
        workspace.stop()
    summary = {
        side: {
            "ratio_median": median(t["ratio"] for t in trials_of),
            "ratio_to_no_failure_median": median(t["ratio_to_no_failure"] for t in trials_of),
            "executions": trials_of[0]["executions"],
            "runs_created": trials_of[0]["runs_created"],
            "trials": trials_of,
        }
        for side, trials_of in results.items()
    }
    after = summary["after"]
    met = (
        after["ratio_median"] <= TARGET["after_ratio_max"] + 0.01
        and all(t["final_dag_run"] == "success" for side in results.values() for t in side)
        and after["executions"] == {"prep": 1, "train": 2, "evaluate": 1}
    )
    return {
        "scenario": "Airflow: prep >> train >> evaluate, train fails once (8 accelerators each)",
        "stage_seconds": os.environ.get("AIRO_BENCH_P11_SECONDS", "4,4,1"),
        "quick": quick,
        "target": TARGET,
        **summary,
        "met": met,
    }


def main(argv: list[str] | None = None) -> int:
    args = parser_for(__doc__).parse_args(argv)
    result = measure(quick=args.quick)
    path = write_result("P11_airflow", result)
    print(
        f"P11 (Airflow) written to {path}: before {fmt(result['before']['ratio_median'], 3)}x, "
        f"after {fmt(result['after']['ratio_median'], 3)}x; met={result['met']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
