"""One deployment, one run: two Airflow deployments (two metadata databases) sharing one
workspace never get each other's runs, and concurrent Dag runs never share secret keys.

Each deployment is a process of its own with its own SQLite metadata database (copied from
one freshly migrated template, so neither has a deployment namespace yet), running the same
Dag with the same run id (``manual__<logical date>``), the way a dev and a prod deployment run
``scheduled__<date>``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow_runs import load_test_dag, scope_keys, take_dag_test_worker

from air_runtime import AirClient

HERE = Path(__file__).resolve().parent
LOGICAL_DATE = "2026-03-01T00:00:00+00:00"

# Runs one step of one deployment: "run" a Dag with dag.test() at LOGICAL_DATE, or "retry"
# the task "run" of an existing Dag run the way the scheduler does after a worker died.
# Writes what the deployment recorded (XCom, task state, its namespace) to RESULT_FILE.
_DEPLOYMENT_STEP = """
import json, os, sys
sys.path.insert(0, os.environ["AIR_TESTS_AIRFLOW"])
import pendulum
from airflow_runs import load_test_dag, run_next_try, set_state, task_instance, xcom
mode, dag_id, argument = sys.argv[1:4]
dag = load_test_dag(dag_id)
if mode == "run":
    when = pendulum.parse(LOGICAL_DATE)
    dag_run = dag.test(run_after=when, logical_date=when, run_conf=json.loads(argument))
    run_id = dag_run.run_id
else:
    run_id = argument
    set_state(dag_id, run_id, "run", "up_for_retry")
    run_next_try(dag, run_id, "run")
from airflow.models.variable import Variable
from airflow.utils.session import create_session
from sqlalchemy import select
with create_session() as session:
    stored = session.scalars(
        select(Variable).where(Variable.key == "airflow_air_deployment_namespace")
    ).first()
    namespace = stored.val if stored is not None else None
result = {
    "dag_run_id": run_id,
    "state": str(task_instance(dag_id, run_id, "run").state),
    "result": xcom(dag_id, run_id, "run"),
    "namespace": namespace,
}
with open(os.environ["RESULT_FILE"], "w") as f:
    json.dump(result, f)
""".replace("LOGICAL_DATE", repr(LOGICAL_DATE))


@pytest.fixture(scope="session")
def migrated_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A freshly migrated metadata database that no Dag has run against."""
    home = tmp_path_factory.mktemp("airflow-template")
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
    }
    subprocess.run(
        [sys.executable, "-c", "from airflow.utils.db import initdb; initdb()"],
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    return home / "airflow.db"


class Deployment:
    """One Airflow deployment: its own home and metadata database."""

    def __init__(self, home: Path, template: Path) -> None:
        self.home = home
        home.mkdir()
        shutil.copy(template, home / "airflow.db")
        self.result_file = home / "result.json"

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.home / 'airflow.db'}",
            "AIR_TESTS_AIRFLOW": str(HERE),
            "RESULT_FILE": str(self.result_file),
        }

    def start(self, mode: str, dag_id: str, argument: str) -> subprocess.Popen[bytes]:
        self.result_file.unlink(missing_ok=True)
        return subprocess.Popen(
            [sys.executable, "-c", _DEPLOYMENT_STEP, mode, dag_id, argument],
            env=self.env(),
            stdout=subprocess.DEVNULL,
            stderr=(self.home / f"{mode}.err").open("wb"),
            start_new_session=True,
        )

    def step(self, mode: str, dag_id: str, argument: str) -> dict[str, Any]:
        process = self.start(mode, dag_id, argument)
        errors = self.home / f"{mode}.err"
        assert process.wait(timeout=300) == 0, f"{mode} failed:\n{errors.read_text()[-3000:]}"
        return json.loads(self.result_file.read_text())


def _wait_until(predicate, timeout: float = 120.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _running_runs(workspace) -> list[int]:
    with AirClient(workspace.host, workspace.token) as client:
        runs, _ = client.list_runs(active_only=True)
    return [r.run_id for r in runs if r.life_cycle_state == "RUNNING"]


def _node_log(workspace, run_id: int) -> str:
    with AirClient(workspace.host, workspace.token) as client:
        return "\n".join(r.body for r in client.iter_logs(run_id))


def test_two_deployments_same_run_id_get_their_own_runs_and_reattach_to_their_own(
    workspace, migrated_template, tmp_path
):
    dag_id = "air_test_crash"  # synchronous wait, retries=2
    dev = Deployment(tmp_path / "dev", migrated_template)
    prod = Deployment(tmp_path / "prod", migrated_template)

    first = dev.step("run", dag_id, json.dumps({"command": "echo result-of-dev"}))
    assert first["state"] == "success"
    assert first["dag_run_id"] == f"manual__{LOGICAL_DATE}"
    dev_run = first["result"]["run_id"]

    # The same Dag run id in the other deployment: a new run, not dev's (finished) one.
    # Its worker is killed while the run is going (it goes on until released).
    release = tmp_path / "release"
    command = f'while [ ! -e "{release}" ]; do sleep 0.2; done; echo result-of-prod'
    worker = prod.start("run", dag_id, json.dumps({"command": command}))
    try:
        _wait_until(lambda: _running_runs(workspace) != [], what="prod's run to be RUNNING")
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)
        (prod_run,) = _running_runs(workspace)
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(timeout=30)
        release.touch()
    assert prod_run != dev_run
    assert workspace.admin.counters()["runs_created"] == 2

    # The scheduler retries the task whose worker died: it reattaches to prod's own run.
    retried = prod.step("retry", dag_id, first["dag_run_id"])
    assert retried["dag_run_id"] == first["dag_run_id"]  # the same Dag run id in both
    assert retried["state"] == "success"
    assert retried["result"]["run_id"] == prod_run
    assert workspace.admin.counters()["runs_created"] == 2  # no third run

    assert "result-of-dev" in _node_log(workspace, dev_run)
    prod_log = _node_log(workspace, prod_run)
    assert "result-of-prod" in prod_log and "result-of-dev" not in prod_log
    # Each deployment made its own namespace, once, and kept it.
    assert first["namespace"] and retried["namespace"]
    assert first["namespace"] != retried["namespace"]


def test_a_pinned_namespace_carries_runs_over_to_a_new_database(
    workspace, migrated_template, tmp_path, monkeypatch
):
    """A migration on purpose: the new database takes the old one's namespace and gets the
    old deployment's run back instead of starting another."""
    dag_id = "air_test_sync"
    old = Deployment(tmp_path / "old", migrated_template)
    first = old.step("run", dag_id, json.dumps({"command": "echo once"}))
    monkeypatch.setenv("AIRFLOW__AIR__DEPLOYMENT_NAMESPACE", first["namespace"])
    new = Deployment(tmp_path / "new", migrated_template)
    second = new.step("run", dag_id, json.dumps({"command": "echo once"}))
    assert second["state"] == "success"
    assert second["result"]["run_id"] == first["result"]["run_id"]
    assert workspace.admin.counters()["runs_created"] == 1


HF_VALUES = {
    "team-a": "hf_ValueOfTeamA_6f1e0c2d9b",
    "team-b": "hf_ValueOfTeamB_a83d11c4e7",
}


@pytest.fixture
def two_workers(airflow_db) -> Iterator[list]:
    workers = [take_dag_test_worker(), take_dag_test_worker()]
    try:
        yield workers
    finally:
        for worker in workers:
            worker.stop()


def test_concurrent_runs_see_their_own_secret_and_leave_no_key(
    workspace, two_workers, monkeypatch, tmp_path
):
    dag = load_test_dag("air_test_secrets")
    monkeypatch.setenv("AIRFLOW_VAR_AIR_TEST_API_KEY", "api-key-shared")
    # Each run's rank waits (up to five minutes) until both runs' ranks have started: the
    # two runs are going at the same time.
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    release = tmp_path / "release"
    command = (
        "python3 -c 'import os, hashlib; "
        'print("seen", hashlib.sha256(os.environ["HF_TOKEN"].encode()).hexdigest())\'; '
        f"touch {barrier}/$$; for i in $(seq 1500); do "
        f'[ "$(ls {barrier} | wc -l)" -ge 2 ] && break; sleep 0.2; done; '
        # Both going until the test has seen them.
        f'while [ ! -e "{release}" ]; do sleep 0.2; done'
    )
    for started, (worker, value) in enumerate(zip(two_workers, HF_VALUES.values(), strict=True)):
        monkeypatch.setenv(
            "AIRFLOW_CONN_HF_TEST",
            json.dumps({"conn_type": "generic", "login": "hf", "password": value}),
        )
        # One Dag run at a time through dag.test()'s start (it writes the Dag to the SQLite
        # metadata database); the second starts while the first run is going.
        _wait_until(lambda n=started: len(_running_runs(workspace)) == n, what="a RUNNING run")
        worker.start(dag.dag_id, {"command": command})  # the worker takes this environment

    # While both runs go, each has keys of its own in the scope.
    def both_running() -> bool:
        return len(_running_runs(workspace)) == 2

    try:
        try:
            _wait_until(both_running, timeout=240, what="both runs to be RUNNING")
        except AssertionError:
            with AirClient(workspace.host, workspace.token) as client:
                runs, _ = client.list_runs(active_only=False)
            details = [(r.run_id, r.life_cycle_state, r.result_state) for r in runs]
            exits = [w.popen.poll() for w in two_workers]
            raise AssertionError(
                f"runs {details}, workers {exits}, keys {scope_keys(workspace, 'air-tests')}"
            ) from None
        keys = scope_keys(workspace, "air-tests")
        values = [k for k in keys if k.endswith(".HF_TOKEN")]
        assert len(values) == 2, keys  # one key per Dag run, not one per (dag, task, NAME)
    finally:
        release.touch()

    for worker in two_workers:
        assert worker.popen.wait(timeout=300) == 0
    with AirClient(workspace.host, workspace.token) as client:
        runs, _ = client.list_runs(active_only=False)
    assert len(runs) == 2 and all(r.result_state == "SUCCESS" for r in runs)
    seen = {
        line.split()[1]
        for run in runs
        for line in _node_log(workspace, run.run_id).splitlines()
        if line.startswith("seen ")
    }
    assert seen == {hashlib.sha256(v.encode()).hexdigest() for v in HF_VALUES.values()}
    assert scope_keys(workspace, "air-tests") == []  # deleted once the runs ended
