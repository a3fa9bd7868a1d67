"""A real Airflow 3 deployment for the end-to-end tests: one process per component.

Scheduler, triggerer, DAG processor and API server (plus Celery workers for the Celery
executor) run as separate processes against a PostgreSQL metadata database, with
AIRFLOW_HOME in a temporary folder and the REST API (v2) as the only way the test talks
to them.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from managed_process import (
    ManagedProcess,
    describe,
    free_port,
    reset_postgres_database,
    run_command,
    tail,
    wait_for,
)

AIRFLOW = str(Path(sys.executable).with_name("airflow"))
E2E_DIR = Path(__file__).resolve().parent
REPO_ROOT = E2E_DIR.parents[1]
TERMINAL_DAG_RUN_STATES = {"success", "failed"}


class AirflowDeployment:
    def __init__(
        self,
        root: Path,
        *,
        executor: str,
        database_dsn: str,
        dag_folders: Mapping[str, Path],
        extra_env: Mapping[str, str] | None = None,
        parallelism: int = 4,
    ) -> None:
        self.root = root
        self.home = root / "airflow_home"
        self.log_dir = root / "service_logs"
        self.home.mkdir(parents=True, exist_ok=True)
        self.database_dsn = database_dsn
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.processes: list[ManagedProcess] = []
        self._restarts: Counter[str] = Counter()
        self._service_args: dict[str, tuple[list[str], dict[str, str]]] = {}
        self._token: str | None = None
        bundles = [
            {
                "name": name,
                "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
                "kwargs": {"path": str(path), "refresh_interval": 0},
            }
            for name, path in dag_folders.items()
        ]
        self.env = {
            **_inherited_env(),
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database_dsn.replace(
                "postgresql://", "postgresql+psycopg2://"
            ),
            "AIRFLOW__CORE__EXECUTOR": executor,
            "AIRFLOW__CORE__PARALLELISM": str(parallelism),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            # Task runners and the triggerer reach the API server on its runtime port.
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base_url}/execution/",
            "AIRFLOW__API__BASE_URL": self.base_url,
            "AIRFLOW__API__WORKERS": "1",
            # The default 5 s is short on a busy 2-core machine; a timeout fails the task.
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30",
            # Every component must sign and check the same task tokens.
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
            "AIRFLOW__API__SECRET_KEY": secrets.token_hex(32),
            # No task retries: a deferred task that Airflow fails (e.g. its trigger firing right
            # after the deferral, apache/airflow#72716) must fail the test, not be retried.
            "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": "True",
            # Runs here last seconds, not hours: look at them more often than the default 5 s
            # (the trigger's first poll keeps its default delay).
            "AIRFLOW__AIR__DEFAULT_POLL_INTERVAL": "2",
            "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(bundles),
            "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
            # Parse once at start; re-parsing every 30 s only costs CPU here.
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600",
            # Free ports: the default log-server ports may be taken on a shared machine.
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            **dict(extra_env or {}),
        }

    # -- lifecycle ---------------------------------------------------------------------

    def migrate(self, timeout: float = 180) -> None:
        reset_postgres_database(self.database_dsn)
        run_command(
            "airflow-db-migrate",
            [AIRFLOW, "db", "migrate"],
            env=self.env,
            log_dir=self.log_dir,
            timeout=timeout,
        )

    def start(
        self, extra_services: Sequence[tuple[str, Sequence[str], Mapping[str, str]]] = ()
    ) -> None:
        # All at once: DAGs start paused, so no task is queued before the API server (which
        # task runners report to) answers and the test unpauses and triggers its DAGs.
        services: list[tuple[str, Sequence[str], Mapping[str, str]]] = [
            ("api-server", ["api-server", "--host", "127.0.0.1", "--port", str(self.port)], {}),
            ("scheduler", ["scheduler"], {}),
            ("triggerer", ["triggerer"], {}),
            ("dag-processor", ["dag-processor"], {}),
            *extra_services,
        ]
        for name, args, env in services:
            self._spawn(name, args, env)
        wait_for(
            self._healthy,
            timeout=150,
            what="Airflow components healthy",
            processes=self.processes,
            interval=1,
        )

    def _spawn(self, name: str, args: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        self._service_args[name.split("#")[0]] = (list(args), dict(env or {}))
        self.processes.append(
            ManagedProcess(
                name, [AIRFLOW, *args], env={**self.env, **(env or {})}, log_dir=self.log_dir
            )
        )

    def restart(self, name: str, *, hard: bool) -> ManagedProcess:
        """Stop the service ``name`` (SIGKILL of its whole group when ``hard``, else SIGTERM
        and a grace period) and start a new process of it with the same arguments."""
        self.kill_service(name, hard=hard)
        return self.start_service(name)

    def kill_service(self, name: str, *, hard: bool = True) -> None:
        """Stop the service ``name`` and leave it down (``start_service`` brings it back)."""
        old = next(p for p in reversed(self.processes) if p.name.split("#")[0] == name)
        if hard:
            old.kill()
        else:
            old.stop(grace=30)
        self.processes.remove(old)

    def start_service(self, name: str) -> ManagedProcess:
        self._restarts[name] += 1  # the new process logs to a file of its own
        self._spawn(f"{name}#{self._restarts[name] + 1}", *self._service_args[name])
        return self.processes[-1]

    def stop(self) -> None:
        for proc in reversed(self.processes):
            proc.stop()
        self.processes.clear()

    def logs(self, lines: int = 40) -> str:
        return describe(self.processes, lines)

    def diagnose(self, runs: Sequence[tuple[str, str]]) -> str:
        """Task states, the logs of unsuccessful tasks and the scheduler's errors, for a failure."""
        parts = []
        for dag_id, run_id in runs:
            tis = self.task_instances(dag_id, run_id)
            parts.append(
                f"{dag_id}/{run_id}: "
                + ", ".join(f"{t['task_id']}={t['state']}(try {t['try_number']})" for t in tis)
            )
            for ti in tis:
                if ti["state"] in ("success", "deferred", "running", "queued", "scheduled"):
                    continue
                folder = self.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
                for log in sorted(folder.glob(f"task_id={ti['task_id']}/*.log*")):
                    parts.append(f"== {log.relative_to(self.home)}\n{tail(log, 25)}")
        scheduler_log = self.log_dir / "scheduler.log"
        errors = [
            line
            for line in tail(scheduler_log, 2000).splitlines()
            if "[error" in line or "Marking task as FAILED" in line
        ]
        parts.append("scheduler errors:\n" + "\n".join(errors[-20:]))
        return "\n".join(parts)

    def _healthy(self) -> bool:
        health = httpx.get(f"{self.base_url}/api/v2/monitor/health", timeout=5).json()
        return all(
            health.get(component, {}).get("status") == "healthy"
            for component in ("metadatabase", "scheduler", "triggerer", "dag_processor")
        )

    # -- REST API v2 -------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        if self._token is None:
            # With all-admins mode a token is issued without credentials.
            response = httpx.get(f"{self.base_url}/auth/token", timeout=10)
            response.raise_for_status()
            self._token = response.json()["access_token"]
        return {"Authorization": f"Bearer {self._token}"}

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        response = httpx.request(
            method, f"{self.base_url}/api/v2{path}", headers=self._headers(), timeout=30, **kwargs
        )
        if response.status_code >= 400:
            raise AssertionError(f"{method} {path} -> {response.status_code}: {response.text}")
        return response.json()

    def wait_for_dags(self, dag_ids: Sequence[str], timeout: float = 120) -> None:
        def parsed() -> bool:
            errors = self.api("GET", "/importErrors")["import_errors"]
            if errors:
                pytest.fail(f"DAG import errors: {json.dumps(errors, indent=1)}")
            dags = {d["dag_id"] for d in self.api("GET", "/dags", params={"limit": 100})["dags"]}
            return set(dag_ids) <= dags

        wait_for(
            parsed,
            timeout=timeout,
            what=f"DAGs {list(dag_ids)} parsed",
            processes=self.processes,
            interval=1,
        )

    def trigger(self, dag_id: str, conf: Mapping[str, Any] | None = None) -> str:
        # DAGs start paused (so scheduled ones in the folder stay idle); unpause what we run.
        self.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False})
        body = {"logical_date": None, "conf": dict(conf or {})}
        run = self.api("POST", f"/dags/{dag_id}/dagRuns", json=body)
        return str(run["dag_run_id"])

    def dag_run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        return dict(self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}"))

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        body = self.api(
            "GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances", params={"limit": 100}
        )
        return list(body["task_instances"])

    def wait_for_runs(
        self,
        runs: Sequence[tuple[str, str]],
        *,
        timeout: float,
        on_poll: Callable[[], None] | None = None,
        interval: float = 1.0,
    ) -> dict[tuple[str, str], dict[str, Any]]:
        """Wait until every (dag_id, run_id) is terminal; ``on_poll`` observes in between."""
        deadline = time.monotonic() + timeout
        while True:
            if on_poll is not None:
                on_poll()
            states = {run: self.dag_run(*run) for run in runs}
            if all(s["state"] in TERMINAL_DAG_RUN_STATES for s in states.values()):
                return states
            dead = [p for p in self.processes if not p.alive]
            if dead or time.monotonic() > deadline:
                pytest.fail(
                    ("a service exited" if dead else f"runs not finished after {timeout:.0f}s")
                    + f"\n{self.diagnose(runs)}\n{self.logs()}"
                )
            time.sleep(interval)

    def task_instance(self, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
        return dict(self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}"))

    def set_task_state(self, dag_id: str, run_id: str, task_id: str, state: str) -> None:
        """What a user's "mark failed / mark success" in the UI does."""
        path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}"
        self.api("PATCH", path, json={"new_state": state})

    def xcom_keys(self, dag_id: str, run_id: str, task_id: str) -> set[str]:
        path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries"
        return {e["key"] for e in self.api("GET", path)["xcom_entries"]}

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str) -> Any:
        entry = self.api(
            "GET",
            f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}",
            params={"deserialize": "true", "stringify": "false"},
        )
        return entry["value"]

    def worker_runs(self, dag_id: str, run_id: str) -> Counter[tuple[str, int]]:
        """How many times a worker ran each task instance, ``(task_id, map_index)``: the
        execution API records a ``running`` event each time a worker starts one (a deferred
        task resumed in a worker counts twice; one ended by its trigger once)."""
        runs: Counter[tuple[str, int]] = Counter()
        offset = 0
        while True:
            body = self.api(
                "GET",
                "/eventLogs",
                params={
                    "dag_id": dag_id,
                    "run_id": run_id,
                    "event": "running",
                    "limit": 100,
                    "offset": offset,
                },
            )
            entries = body["event_logs"]
            for entry in entries:
                map_index = entry.get("map_index")
                runs[(entry["task_id"], -1 if map_index is None else int(map_index))] += 1
            offset += len(entries)
            if not entries or offset >= body["total_entries"]:
                return runs

    def extra_links(self, dag_id: str, run_id: str, task_id: str) -> dict[str, str | None]:
        path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/links"
        return dict(self.api("GET", path)["extra_links"])


def add_airflow_connections(deployment: AirflowDeployment, workspace: Any) -> None:
    """The connections of ``airflow_connection_env``, stored in the metadata database through
    the REST API the way an operator of a deployment adds them (no environment variable)."""
    for body in (
        {
            "connection_id": "databricks_default",
            "conn_type": "databricks",
            "host": workspace.host,
            "password": workspace.token,
        },
        {
            "connection_id": "hf_default",
            "conn_type": "generic",
            "password": "hf-placeholder-not-a-token",
        },
    ):
        deployment.api("POST", "/connections", json=body)


def task_log_text(deployment: AirflowDeployment, dag_id: str, run_id: str, task_id: str) -> str:
    """Every log file of a task instance (all tries) as written by the deployment."""
    folder = deployment.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
    return "\n".join(p.read_text() for p in sorted(folder.glob(f"task_id={task_id}/*.log*")))


def task_log_holding(
    deployment: AirflowDeployment,
    dag_id: str,
    run_id: str,
    task_id: str,
    text: str,
    timeout: float = 120.0,
) -> str:
    """``task_log_text`` once it holds ``text`` (or when ``timeout`` runs out: the caller's
    assertion then shows the log). The triggerer writes a trigger's lines from its own
    process, so a task can be SUCCESS before its trigger's last line is in the file."""
    deadline = time.monotonic() + timeout
    log = task_log_text(deployment, dag_id, run_id, task_id)
    while text not in log and time.monotonic() < deadline:
        time.sleep(0.2)
        log = task_log_text(deployment, dag_id, run_id, task_id)
    return log


def airflow_connection_env(workspace: Any) -> dict[str, str]:
    """The default Databricks connection of every Airflow process, aimed at the workspace."""
    return {
        "AIRFLOW_CONN_DATABRICKS_DEFAULT": json.dumps(
            {"conn_type": "databricks", "host": workspace.host, "password": workspace.token}
        ),
        # rl_pipeline passes HF_TOKEN from this connection as a Databricks secret.
        "AIRFLOW_CONN_HF_DEFAULT": json.dumps(
            {"conn_type": "generic", "password": "hf-placeholder-not-a-token"}
        ),
    }


def _inherited_env() -> dict[str, str]:
    # Nothing from the outer shell's Airflow setup may leak into the deployment.
    return {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}


class DeferralObserver:
    """Samples a DAG run's task instances while it runs: how many wait in the triggerer."""

    def __init__(self, deployment: AirflowDeployment, dag_id: str, run_id: str) -> None:
        self.deployment = deployment
        self.dag_id = dag_id
        self.run_id = run_id
        self.max_deferred = 0
        self.max_running = 0
        self.deferred_task_ids: set[str] = set()
        self.trigger_classpaths: set[str] = set()
        self.triggerer_ids: set[int] = set()

    def poll(self) -> None:
        tis = self.deployment.task_instances(self.dag_id, self.run_id)
        deferred = [t for t in tis if t["state"] == "deferred"]
        self.max_deferred = max(self.max_deferred, len(deferred))
        self.max_running = max(self.max_running, sum(t["state"] == "running" for t in tis))
        for ti in deferred:
            self.deferred_task_ids.add(ti["task_id"])
            if ti.get("trigger"):
                self.trigger_classpaths.add(ti["trigger"]["classpath"])
                if ti["trigger"]["triggerer_id"] is not None:  # None until a triggerer claims it
                    self.triggerer_ids.add(ti["trigger"]["triggerer_id"])


def check_air_task_instances(
    deployment: AirflowDeployment, dag_id: str, run_id: str, workspace_client: Any
) -> dict[str, int]:
    """Every task succeeded; each AI Runtime task's XComs, extra link and remote run agree.

    Returns task id -> AI Runtime run id for the tasks that pushed one.
    """
    tis = deployment.task_instances(dag_id, run_id)
    assert tis, f"{dag_id} has no task instances"
    not_ok = {t["task_id"]: t["state"] for t in tis if t["state"] != "success"}
    assert not not_ok, (
        f"{dag_id}: tasks not successful: {not_ok}\n{deployment.diagnose([(dag_id, run_id)])}"
    )
    retried = [t["task_id"] for t in tis if t["try_number"] > 1]
    assert not retried, f"{dag_id}: tasks needed another try: {retried}"
    host = workspace_client.host.rstrip("/")
    remote_runs: dict[str, int] = {}
    for ti in tis:
        if not (ti["operator"] or "").startswith("Air"):
            continue
        if "run_id" not in deployment.xcom_keys(dag_id, run_id, ti["task_id"]):
            continue
        remote_id = deployment.xcom(dag_id, run_id, ti["task_id"], "run_id")
        url = deployment.xcom(dag_id, run_id, ti["task_id"], "run_page_url")
        assert int(remote_id) > 0, (ti["task_id"], remote_id)
        assert url == f"{host}/jobs/runs/{remote_id}", (ti["task_id"], url)
        links = deployment.extra_links(dag_id, run_id, ti["task_id"])
        assert links.get("AI Runtime run") == url, (ti["task_id"], links)
        mlflow = links.get("MLflow run")
        assert mlflow is None or mlflow.startswith(f"{host}/ml/experiments/"), links
        remote = workspace_client.get_run(int(remote_id))
        assert remote.is_success, (ti["task_id"], remote)
        remote_runs[ti["task_id"]] = int(remote_id)
    return remote_runs


def remote_run_names(workspace_client: Any) -> Counter[str]:
    """How many runs of each name the workspace holds: a duplicate GPU run shows up here."""
    names: Counter[str] = Counter()
    page_token = None
    while True:
        runs, page_token = workspace_client.list_runs(
            active_only=False, limit=25, page_token=page_token
        )
        names.update(run.run_name for run in runs)
        if not page_token:
            return names
