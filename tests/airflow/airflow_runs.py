"""Running test Dags for real: ``dag.test()``, single tries the way the scheduler starts them,
and reading back task states and XComs from the metadata database."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[2]
TEST_DAGS = Path(__file__).resolve().parent / "dag_files"


@cache
def _module(path: Path) -> ModuleType:
    name = f"_air_dagfile_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_test_dag(dag_id: str, file_name: str = "air_test_dags.py") -> Any:
    module = _module(TEST_DAGS / file_name)
    for value in vars(module).values():
        if getattr(value, "dag_id", None) == dag_id and hasattr(value, "task_dict"):
            return value
    raise KeyError(dag_id)


def repo_dag(file_name: str) -> Any:
    return _module(REPO / "dags" / file_name).dag


def task_states(dag_run: Any) -> dict[str, str]:
    from airflow.utils.session import create_session

    with create_session() as session:
        return {
            ti.task_id: str(getattr(ti.state, "value", ti.state))
            for ti in dag_run.get_task_instances(session=session)
        }


def xcom(
    dag_id: str, run_id: str, task_id: str, key: str = "return_value", map_index: int | None = None
) -> Any:
    """An XCom of a task (``map_index``: of that mapped task instance)."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    query = select(XComModel).where(
        XComModel.dag_id == dag_id,
        XComModel.run_id == run_id,
        XComModel.task_id == task_id,
        XComModel.key == key,
    )
    if map_index is not None:
        query = query.where(XComModel.map_index == map_index)
    with create_session() as session:
        row = session.scalars(query).first()
        return None if row is None else XComModel.deserialize_value(row)


def all_xcom_text(dag_id: str) -> str:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.scalars(select(XComModel).where(XComModel.dag_id == dag_id)).all()
        return "\n".join(repr(row.value) for row in rows)


def scope_keys(workspace: Any, scope: str) -> list[str]:
    """The key names of a secret scope (``secrets/list``; empty when there is no scope)."""
    from air_runtime import AirClient

    with AirClient(workspace.host, workspace.token) as client:
        return [s.key for s in client.list_secrets(scope)]


def rendered_fields_text(dag_id: str) -> str:
    from airflow.models.renderedtifields import RenderedTaskInstanceFields as RTIF
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    if hasattr(RTIF, "dag_id"):  # Airflow 3.3: a row per (Dag, task, run, map index)
        query = select(RTIF).where(RTIF.dag_id == dag_id)
    else:  # 3.4: a row per task attempt, keyed by its task instance id
        query = (
            select(RTIF)
            .join(TaskInstance, RTIF.task_instance_id == TaskInstance.id)
            .where(TaskInstance.dag_id == dag_id)
        )
    with create_session() as session:
        rows = session.scalars(query).all()
        return "\n".join(repr(row.rendered_fields) for row in rows)


def latest_dag_run(dag_id: str) -> Any:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        run = session.scalars(
            select(DagRun).where(DagRun.dag_id == dag_id).order_by(DagRun.id.desc())
        ).first()
        session.expunge_all()
        return run


def task_instance(dag_id: str, run_id: str, task_id: str) -> Any:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        ti = session.scalars(
            select(TaskInstance).where(
                TaskInstance.dag_id == dag_id,
                TaskInstance.run_id == run_id,
                TaskInstance.task_id == task_id,
            )
        ).one()
        session.expunge_all()
        return ti


def run_next_try(dag: Any, run_id: str, task_id: str) -> str:
    """Start the task's next try the way the scheduler does (``try_number + 1``, SCHEDULED)
    and run it in this process, triggers inline; return the resulting state."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.sdk.definitions.dag import _run_task
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import select

    with create_session() as session:
        ti = session.scalars(
            select(TaskInstance).where(
                TaskInstance.dag_id == dag.dag_id,
                TaskInstance.run_id == run_id,
                TaskInstance.task_id == task_id,
            )
        ).one()
        ti.try_number += 1
        ti.state = TaskInstanceState.SCHEDULED
        session.commit()
        session.refresh(ti)
        session.expunge(ti)
    _run_task(ti=ti, task=dag.task_dict[task_id], run_triggerer=True)
    return str(task_instance(dag.dag_id, run_id, task_id).state)


def set_state(dag_id: str, run_id: str, task_id: str, state: str) -> None:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import update

    with create_session() as session:
        session.execute(
            update(TaskInstance)
            .where(
                TaskInstance.dag_id == dag_id,
                TaskInstance.run_id == run_id,
                TaskInstance.task_id == task_id,
            )
            .values(state=state)
        )


def clear_task(dag_id: str, run_id: str, task_id: str) -> None:
    """What "Clear" in the UI does for one finished task."""
    from airflow.models.taskinstance import TaskInstance, clear_task_instances
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        tis = session.scalars(
            select(TaskInstance).where(
                TaskInstance.dag_id == dag_id,
                TaskInstance.run_id == run_id,
                TaskInstance.task_id == task_id,
            )
        ).all()
        clear_task_instances(list(tis), session)


# A Python process that warms up what every ``dag.test()`` pays once per process (importing
# Airflow and the test Dags, building the in-process execution API and serving its first
# request), then waits for one ``{"dag_id", "conf", "env"}`` line on stdin and runs that Dag
# with ``dag.test()``: a task in a process of its own that a test can signal or kill, without
# the ten-odd seconds of start-up inside the test. Task output goes nowhere; "ready" goes to
# the original stdout.
_DAG_TEST_WORKER = """
import os, sys
ready = os.fdopen(os.dup(1), "w")
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
import importlib, importlib.util, json
from airflow.sdk.execution_time.supervisor import in_process_api_server
transport = in_process_api_server().transport
# The client library the transport is of: httpx on Airflow 3.3, httpx2 on 3.4.
http = importlib.import_module(type(transport).__module__.split(".")[0])
with http.Client(transport=transport, base_url="http://in-process") as c:
    c.get("/execution/")
spec = importlib.util.spec_from_file_location("dags", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
print("ready", file=ready, flush=True)
line = sys.stdin.readline()
if not line:
    sys.exit(0)
request = json.loads(line)
os.environ.update(request["env"])
dag = next(v for v in vars(module).values() if getattr(v, "dag_id", None) == request["dag_id"])
dag.test(run_conf=request["conf"])
"""


class DagTestWorker:
    """One ``dag.test()`` of a test Dag in a separate, warmed-up process (see above)."""

    def __init__(self) -> None:
        self.popen = subprocess.Popen(
            [sys.executable, "-c", _DAG_TEST_WORKER, str(TEST_DAGS / "air_test_dags.py")],
            env=dict(os.environ),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )

    def start(self, dag_id: str, conf: dict[str, Any]) -> None:
        """Run the Dag (with this process's environment, e.g. the test's connection)."""
        assert self.popen.stdout is not None and self.popen.stdin is not None
        ready = self.popen.stdout.readline()  # blocks while the worker is still warming up
        assert ready.strip() == "ready", f"worker did not start (exit {self.popen.poll()})"
        request = {"dag_id": dag_id, "conf": conf, "env": dict(os.environ)}
        self.popen.stdin.write(json.dumps(request) + "\n")
        self.popen.stdin.flush()

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(timeout=30)
        for stream in (self.popen.stdin, self.popen.stdout):
            if stream is not None:
                stream.close()


_spare_workers: list[DagTestWorker] = []


def prestart_dag_test_workers(count: int) -> None:
    """Start ``count`` workers now, so they warm up while other tests run."""
    _spare_workers.extend(DagTestWorker() for _ in range(count))


def take_dag_test_worker() -> DagTestWorker:
    return _spare_workers.pop(0) if _spare_workers else DagTestWorker()


def stop_spare_dag_test_workers() -> None:
    while _spare_workers:
        _spare_workers.pop().stop()
