"""R1, R2 and R6 against Airflow's own daemons: a LocalExecutor deployment on PostgreSQL
(scheduler, triggerer, DAG processor, API server: tests/e2e/airflow_deployment.py) whose
processes are killed for real, driven only through Airflow's REST API.

- R1 ``task_sigkill``: the task process of a deferrable AirRunOperator is SIGKILLed between
  its submit and its deferral (a fault holds the submit's answer back: the run exists, the
  task does not know it yet). The
  supervisor fails the try, the scheduler retries it, and the retry must reattach to the
  run the killed try started: exactly one run per Dag run, never cancelled.
- R2 ``marked_failed``: a user marks a running (worker-side) or deferred task failed; the
  run must be cancelled within 30 s (the supervisor's SIGTERM → ``on_kill``, or the
  triggerer's ``on_kill``).
- R5 ``deployment_leaks``: a secret from an Airflow connection and the workspace token flow
  through a deferred run; neither appears in any file of the deployment (every service's
  and task's log), its PostgreSQL metadata database, or the workspace's request log and data.
- R6 ``triggerer_failover``: the triggers of a deferred task and of a deferred workflow stage
  are handed to another triggerer (its job row and the triggers' owner written in the metadata
  database, as Airflow's own reassignment writes them) while they wait. On Airflow 3.3 the
  triggerer that held them calls ``on_kill`` for each (apache/airflow#73454); the runs must
  keep going, and when the other triggerer stops heart-beating the first takes them back and
  the tasks end with their runs' results: no cancel, no second submit.
- R6 ``triggerer_daemon_restart``: the ``airflow triggerer`` process is SIGKILLed or stopped
  with SIGTERM while the task waits in it, and a new triggerer is started. The new one must
  take the wait over and the task end with the run's true result; the run is never
  cancelled and never submitted again.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import HERE, rng_for, trials
from helpers import (
    PRINT_SECRET_DIGEST,
    LeakScan,
    check_cancelled,
    client_for,
    digest,
    postgres_text,
    record_cancel_time,
    running,
    wait_for_state,
    workspace_data_text,
)

from air_runtime.local import LocalWorkspace, start_local_workspace

# The deployment harness of the end-to-end tests.
sys.path.insert(0, str(HERE.parent / "e2e"))
from airflow_deployment import AirflowDeployment, airflow_connection_env, task_log_holding
from deployment_services import POSTGRES_URL, POSTGRESQL, require_services
from managed_process import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]

DAGS = HERE / "deployment_dags"
SIGKILL_DAG, DEFERRED_DAG, SYNC_DAG = "daemon_task_sigkill", "daemon_deferred", "daemon_sync"
SECRETS_DAG = "daemon_secrets"
FAILOVER_DAG = "daemon_failover"
HF_SECRET = "af-secret-" + secrets.token_hex(16)
TASK = "run"
# How long the workspace holds its answer to the first try's submit (the run already made),
# and to any runs/get: longer than the kill can come after the run exists, so every kill
# lands in the window, whatever the machine's speed.
KILL_WITHIN_S = 3.2
HOLD_MS = int(KILL_WITHIN_S * 1000) + 6000
# A triggerer that stopped heart-beating this long ago loses its triggers to another one.
TRIGGERER_TAKEOVER_S = 12


@pytest.fixture(scope="module")
def daemon_workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalWorkspace]:
    ws = start_local_workspace(
        data_dir=tmp_path_factory.mktemp("workspace"),
        token="ws-token-" + secrets.token_hex(16),
        kill_grace_s=1.0,
    )
    try:
        yield ws
    finally:
        ws.stop()


@pytest.fixture(scope="module")
def deployment(
    daemon_workspace: LocalWorkspace, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AirflowDeployment]:
    require_services(POSTGRESQL)
    airflow = AirflowDeployment(
        tmp_path_factory.mktemp("airflow"),
        executor="LocalExecutor",
        database_dsn=f"{POSTGRES_URL}/airo_airflow_reliability",
        dag_folders={"daemon-faults": DAGS},
        extra_env={
            **airflow_connection_env(daemon_workspace),
            "AIRFLOW_CONN_HF_DEFAULT": json.dumps({"conn_type": "generic", "password": HF_SECRET}),
            "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": str(TRIGGERER_TAKEOVER_S),
        },
        parallelism=2,
    )
    try:
        airflow.migrate()
        airflow.start()
        airflow.wait_for_dags([SIGKILL_DAG, DEFERRED_DAG, SYNC_DAG, SECRETS_DAG, FAILOVER_DAG])
        yield airflow
    finally:
        airflow.stop()


# --- helpers --------------------------------------------------------------------------------


class Trial:
    """One Dag run of a campaign and the workspace counters around it."""

    def __init__(self, airflow: AirflowDeployment, ws: LocalWorkspace, dag_id: str) -> None:
        self.airflow = airflow
        self.ws = ws
        self.dag_id = dag_id
        self.before = ws.admin.counters()
        self.run_id = ""

    def trigger(self, command: str) -> None:
        self.run_id = self.airflow.trigger(self.dag_id, {"command": command})

    def task(self) -> dict[str, Any]:
        return self.airflow.task_instance(self.dag_id, self.run_id, TASK)

    def wait_task(self, predicate: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            ti = self.task()
            return ti if predicate(ti) else None

        return wait_for(
            check, timeout=120, what=what, processes=self.airflow.processes, interval=0.1
        )

    def remote_run_id(self) -> int:
        return int(self.airflow.xcom(self.dag_id, self.run_id, TASK, "run_id"))

    def finish(self) -> str:
        states = self.airflow.wait_for_runs([(self.dag_id, self.run_id)], timeout=240)
        return str(states[(self.dag_id, self.run_id)]["state"])

    def delta(self) -> dict[str, int]:
        """Runs created, submits and cancel requests since the trial started."""
        now = self.ws.admin.counters()
        before_tokens = self.before["submits_per_token"]
        return {
            "runs_created": now["runs_created"] - self.before["runs_created"],
            "submits": sum(
                n - before_tokens.get(token, 0) for token, n in now["submits_per_token"].items()
            ),
            "cancels": now["requests"].get("jobs/runs/cancel", 0)
            - self.before["requests"].get("jobs/runs/cancel", 0),
        }

    def describe(self) -> str:
        return self.airflow.diagnose([(self.dag_id, self.run_id)])


def _deferred_and_claimed(ti: dict[str, Any]) -> bool:
    trigger = ti.get("trigger") or {}
    return ti["state"] == "deferred" and trigger.get("triggerer_id") is not None


def _campaign(tally: Any, count: int, trial: Callable[[int], None]) -> None:
    for n in range(count):
        tally.trials += 1
        try:
            trial(n)
        except (Exception, pytest.fail.Exception) as exc:  # counted, then the next trial
            tally.crashes += 1
            tally.fail(f"trial {n}: {type(exc).__name__}: {str(exc)[:3000]}")


# --- R1 -------------------------------------------------------------------------------------


@pytest.mark.row("R1")
def test_task_sigkill(deployment: AirflowDeployment, daemon_workspace, tally) -> None:
    ws = daemon_workspace
    rng = rng_for("R1-daemon-sigkill")
    kills = {"before_run_id_xcom": 0, "after_run_id_xcom": 0}
    delays: list[float] = []

    def trial(n: int) -> None:
        t = Trial(deployment, ws, SIGKILL_DAG)
        # Set before the task starts: however fast it submits, the window is held open (a
        # first try reads no run after its submit, so the submit's own answer is held; the
        # retry must get that run back, not make a second).
        ws.admin.set_faults(
            {
                "jobs/runs/submit": {"answer_latency_ms": HOLD_MS},
                "jobs/runs/get": {"latency_ms": HOLD_MS},
            }
        )
        try:
            # Some runs are still going when the retry reattaches, some have already ended.
            t.trigger(f"sleep {rng.uniform(1.0, 8.0):.1f}")
            first = t.wait_task(lambda ti: ti["state"] == "running" and ti["pid"], "try 1 running")
            wait_for(
                lambda: t.delta()["runs_created"] >= 1,
                timeout=60,
                what="the first try's submit",
                processes=deployment.processes,
                interval=0.05,
            )
            delay = rng.uniform(0.0, KILL_WITHIN_S)
            time.sleep(delay)
            recorded = "run_id" in deployment.xcom_keys(t.dag_id, t.run_id, TASK)
            now = t.task()
            if now["state"] != "running" or now["try_number"] != 1:
                raise AssertionError(f"try 1 left the window before the kill: {now['state']}")
            os.kill(int(first["pid"]), signal.SIGKILL)
        finally:
            ws.admin.set_faults({})
        delays.append(round(delay, 2))
        kills["after_run_id_xcom" if recorded else "before_run_id_xcom"] += 1
        state = t.finish()
        ti = t.task()
        delta = t.delta()
        if delta["runs_created"] > 1:
            tally.duplicates += delta["runs_created"] - 1
        tally.unexpected_retries += max(ti["try_number"] - 2, 0)
        if state != "success" or ti["try_number"] != 2:
            raise AssertionError(
                f"Dag run {state}, try {ti['try_number']} (expected success on try 2)\n"
                + t.describe()
            )
        if delta["runs_created"] != 1 or delta["cancels"]:
            raise AssertionError(f"{delta} for one logical submission")
        with client_for(ws) as client:
            remote = client.get_run(t.remote_run_id())
        if not remote.is_success:
            raise AssertionError(f"the reattached run ended {remote.describe()}")

    _campaign(tally, trials(1, 10), trial)
    tally.notes.update(kills=kills, kill_after_submit_s=delays)


# --- R2 -------------------------------------------------------------------------------------


@pytest.mark.row("R2")
def test_marked_failed(deployment: AirflowDeployment, daemon_workspace, tally) -> None:
    ws = daemon_workspace
    rng = rng_for("R2-daemon-marked-failed")
    marked_failed = {"deferred": 0, "worker": 0}

    def trial(n: int) -> None:
        where = "worker" if n % 2 else "deferred"
        t = Trial(deployment, ws, SYNC_DAG if where == "worker" else DEFERRED_DAG)
        t.trigger("sleep 300")
        if where == "deferred":
            t.wait_task(_deferred_and_claimed, "the task deferred to the triggerer")
        else:
            t.wait_task(lambda ti: ti["state"] == "running", "the task running")
            wait_for(
                lambda: "run_id" in deployment.xcom_keys(t.dag_id, t.run_id, TASK),
                timeout=60,
                what="the run_id XCom",
                processes=deployment.processes,
            )
        remote_id = t.remote_run_id()
        with client_for(ws) as client:
            state = wait_for_state(client, remote_id, running, 30)
        if not running(state):  # a run still pending (or ended) proves nothing about a kill
            raise AssertionError(f"run {remote_id} is not running: {state.describe()}")
        time.sleep(rng.uniform(0.5, 2.0))
        marked = time.time()
        deployment.set_task_state(t.dag_id, t.run_id, TASK, "failed")
        took = check_cancelled(tally, ws, remote_id, marked, f"trial {n} ({where})")
        record_cancel_time(tally, took)
        marked_failed[where] += 1
        if t.finish() != "failed":
            raise AssertionError("the Dag run of a task marked failed did not fail")

    _campaign(tally, trials(2, 6), trial)
    tally.notes.update(marked_failed=marked_failed)


# --- R5 -------------------------------------------------------------------------------------


@pytest.mark.row("R5")
def test_deployment_leaks(deployment: AirflowDeployment, daemon_workspace, tally) -> None:
    ws = daemon_workspace
    values = {"workspace_token": ws.token, "airflow_secret": HF_SECRET}
    scan = LeakScan(tally, values)

    tally.trials += 1
    t = Trial(deployment, ws, SECRETS_DAG)
    t.trigger(PRINT_SECRET_DIGEST)
    if t.finish() != "success":
        tally.fail(f"the Dag run with a connection secret failed\n{t.describe()}")
    files = [p for p in deployment.root.rglob("*") if p.is_file()]
    for path in files:
        scan(str(path.relative_to(deployment.root)), path.read_bytes().decode("utf-8", "replace"))
    scan("Airflow metadata database", postgres_text(deployment.database_dsn))
    scan("request log (admin API)", json.dumps(ws.admin.request_log(limit=10_000)))
    for name, text in workspace_data_text(ws.data_dir).items():
        scan(f"workspace data {name}", text)
    with client_for(ws) as client:
        logs = "\n".join(rec.body for rec in client.iter_logs(t.remote_run_id(), node=0))
    if digest(HF_SECRET) not in logs:
        tally.fail(f"the run did not receive the secret (no digest in its log): {logs[-500:]}")
    tally.notes.update(files_scanned=len(files))
    scan.report()


# --- R6 -------------------------------------------------------------------------------------


@pytest.mark.row("R6")
def test_triggerer_daemon_restart(
    deployment: AirflowDeployment, daemon_workspace, tally, tmp_path: Path
) -> None:
    ws = daemon_workspace
    rng = rng_for("R6-daemon-triggerer")
    restarts = {"SIGKILL": 0, "SIGTERM": 0}
    handovers = 0

    def trial(n: int) -> None:
        nonlocal handovers
        hard = n % 2 == 0
        fails = n % 4 in (1, 2)  # each restart kind with a succeeding and a failing run
        # The run ends when the test releases it: always after the restart (however slow the
        # machine), sometimes before and sometimes after the new triggerer took the wait over.
        release = tmp_path / f"release-{n}"
        t = Trial(deployment, ws, DEFERRED_DAG)
        t.trigger(f"while [ ! -e {release} ]; do sleep 0.2; done" + ("\nexit 3" if fails else ""))
        try:
            ti = t.wait_task(_deferred_and_claimed, "the task deferred to the triggerer")
            claimed_by = {ti["trigger"]["triggerer_id"]}
            remote_id = t.remote_run_id()
            time.sleep(rng.uniform(0.5, 3.0))
            with client_for(ws) as client:
                if client.get_run(remote_id).is_terminal:
                    raise AssertionError(f"run {remote_id} ended before it was released")
            deployment.restart("triggerer", hard=hard)
            restarts["SIGKILL" if hard else "SIGTERM"] += 1
            time.sleep(rng.uniform(0.0, TRIGGERER_TAKEOVER_S))
        finally:  # never leave the run waiting for ever
            release.touch()

        def observe() -> None:
            now = t.task()
            if now["state"] == "deferred" and (now.get("trigger") or {}).get("triggerer_id"):
                claimed_by.add(now["trigger"]["triggerer_id"])

        states = deployment.wait_for_runs(
            [(t.dag_id, t.run_id)], timeout=240, on_poll=observe, interval=0.5
        )
        handovers += len(claimed_by) > 1
        state = states[(t.dag_id, t.run_id)]["state"]
        final = t.task()
        delta = t.delta()
        with client_for(ws) as client:
            remote = client.get_run(remote_id)
        expected = ("failed", "FAILED") if fails else ("success", "SUCCESS")
        if (state, remote.result_state) != expected or final["try_number"] != 1:
            tally.orphans += remote.result_state == "CANCELED"
            raise AssertionError(
                f"Dag run {state} on try {final['try_number']}, run {remote.describe()};"
                f" expected {expected} on try 1\n{t.describe()}"
            )
        if delta["runs_created"] != 1 or delta["submits"] != 1 or delta["cancels"]:
            raise AssertionError(f"{delta} across a triggerer restart")

    _campaign(tally, trials(1, 4), trial)
    tally.notes.update(restarts=restarts, new_triggerer_seen_claiming=handovers)


# --- R6: failover ---------------------------------------------------------------------------

FAILOVER_TASKS = ("run", "flow.train")


class _OtherTriggerer:
    """A triggerer job row that heart-beats once: what a second triggerer that took triggers
    over and then stopped looks like in the metadata database."""

    def __init__(self, dsn: str) -> None:
        import psycopg2

        self.connection = psycopg2.connect(dsn)
        self.connection.autocommit = True
        with self.connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO job (state, job_type, start_date, latest_heartbeat, hostname, "
                "unixname) VALUES ('running', 'TriggererJob', now(), now(), "
                "'other-triggerer', 'airflow') RETURNING id"
            )
            self.job_id = int(cursor.fetchone()[0])

    def take_over(self, trigger_ids: list[int]) -> None:
        with self.connection.cursor() as cursor:
            cursor.execute(
                "UPDATE trigger SET triggerer_id = %s WHERE id = ANY(%s)",
                (self.job_id, trigger_ids),
            )

    def close(self) -> None:
        with self.connection.cursor() as cursor:
            cursor.execute(
                "UPDATE job SET state = 'failed', end_date = now() WHERE id = %s", (self.job_id,)
            )
        self.connection.close()


@pytest.mark.row("R6")
def test_triggerer_failover(
    deployment: AirflowDeployment, daemon_workspace, tally, tmp_path: Path
) -> None:
    ws = daemon_workspace

    def trial(n: int) -> None:
        release = tmp_path / f"failover-release-{n}"
        t = Trial(deployment, ws, FAILOVER_DAG)
        t.trigger(f"while [ ! -e {release} ]; do sleep 0.2; done")
        other = None
        try:
            tis = {
                task_id: wait_for(
                    lambda task_id=task_id: (
                        ti
                        if _deferred_and_claimed(
                            ti := deployment.task_instance(t.dag_id, t.run_id, task_id)
                        )
                        else None
                    ),
                    timeout=180,
                    what=f"{task_id} deferred and claimed",
                    processes=deployment.processes,
                    interval=0.2,
                )
                for task_id in FAILOVER_TASKS
            }
            first_owner = {ti["trigger"]["triggerer_id"] for ti in tis.values()}
            other = _OtherTriggerer(f"{POSTGRES_URL}/airo_airflow_reliability")
            other.take_over([int(ti["trigger"]["id"]) for ti in tis.values()])
            # The first triggerer lets each trigger go (on_kill on Airflow 3.3) and says why.
            for task_id in FAILOVER_TASKS:
                log = task_log_holding(deployment, t.dag_id, t.run_id, task_id, "keeps running")
                assert "another triggerer took this trigger over" in log, log[-3000:]

            # The other one stops heart-beating: the first takes the triggers back.
            def back_with_first() -> bool:
                owners = {
                    (
                        deployment.task_instance(t.dag_id, t.run_id, task_id).get("trigger") or {}
                    ).get("triggerer_id")
                    for task_id in FAILOVER_TASKS
                }
                return owners == first_owner

            wait_for(
                back_with_first,
                timeout=TRIGGERER_TAKEOVER_S * 10,
                what="the triggers back with the first triggerer",
                processes=deployment.processes,
                interval=0.5,
            )
            other.close()
            other = None
            with client_for(ws) as client:
                for task_id in FAILOVER_TASKS:
                    remote_id = int(deployment.xcom(t.dag_id, t.run_id, task_id, "run_id"))
                    state = client.get_run(remote_id)
                    assert not state.is_terminal, f"{task_id}: run {remote_id} {state.describe()}"
        finally:
            release.touch()
            if other is not None:
                other.close()
        state = t.finish()
        delta = t.delta()
        with client_for(ws) as client:
            results = {
                task_id: client.get_run(
                    int(deployment.xcom(t.dag_id, t.run_id, task_id, "run_id"))
                ).result_state
                for task_id in FAILOVER_TASKS
            }
        tally.orphans += sum(result == "CANCELED" for result in results.values())
        if state != "success" or set(results.values()) != {"SUCCESS"}:
            raise AssertionError(f"Dag run {state}, runs {results}\n{t.describe()}")
        # One run for the task, one for the workflow; never cancelled, never submitted again.
        if delta["runs_created"] != 2 or delta["cancels"]:
            raise AssertionError(f"{delta} across a failover")

    _campaign(tally, trials(1, 2), trial)
