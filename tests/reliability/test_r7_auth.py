"""R7 auth.

- ``expired_oauth``: the workspace stops accepting an OAuth token the client still believes
  fresh (its expiry moved into the past on the server): exactly one token refresh, then the
  request succeeds (sync and async clients).
- ``revoked_token``: a revoked token fails at once (one request in the request log, no
  retry), with a message naming the host and never the token; through the client, a real
  Airflow task with retries (one try only) and a Dagster asset.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path

import pytest
from conftest import connection_json, trials
from helpers import reliability_dag

from air_runtime import AirClient, AsyncAirClient, OAuthM2M
from air_runtime._errors import AuthError
from air_runtime.local import start_local_workspace

pytestmark = [pytest.mark.row("R7"), pytest.mark.timeout(600)]


def _expire_all_tokens(data_dir: Path) -> None:
    connection = sqlite3.connect(data_dir / "state.sqlite3", timeout=10)
    try:
        connection.execute("UPDATE access_tokens SET expires_at = 0")
        connection.commit()
    finally:
        connection.close()


def _since(entries: list[dict], started: float, path: str) -> list[dict]:
    return [e for e in entries if e["time"] >= started and e["path"] == path]


def test_expired_oauth(tmp_path: Path, tally) -> None:
    ws = start_local_workspace(
        data_dir=tmp_path / "workspace", oauth_clients={"sp-id": "sp-secret"}, retry_interval_s=0.05
    )
    try:
        for trial in range(trials(2, 10)):
            asynchronous = trial % 2 == 1
            tally.trials += 1
            credentials = OAuthM2M(ws.host, "sp-id", "sp-secret")
            if asynchronous:

                async def twice(credentials: OAuthM2M = credentials) -> None:
                    async with AsyncAirClient(ws.host, credentials=credentials) as client:
                        await client.list_runs()
                        _expire_all_tokens(ws.data_dir)
                        client._core.identity = None
                        await client.whoami()

                started = time.time()
                asyncio.run(twice())
            else:
                started = time.time()
                with AirClient(ws.host, credentials=credentials) as client:
                    client.list_runs()
                    _expire_all_tokens(ws.data_dir)
                    client.whoami()
            log = ws.admin.request_log(limit=10_000)
            tokens = _since(log, started, "/oidc/v1/token")
            me = _since(log, started, "/api/2.0/preview/scim/v2/Me")
            statuses = [e["status"] for e in me]
            if len(tokens) != 2:
                tally.fail(f"trial {trial}: {len(tokens)} token requests (1 + exactly 1 refresh)")
                tally.unexpected_retries += abs(len(tokens) - 2)
            if statuses != [401, 200]:
                tally.fail(f"trial {trial}: the expired request went {statuses}")
                tally.unexpected_retries += max(len(statuses) - 2, 0)
    finally:
        ws.stop()


def _check_message(tally, where: str, message: str, host: str, token: str) -> None:
    if token in message:
        tally.leaks += 1
        tally.fail(f"{where}: the message contains the token")
    if host not in message:
        tally.fail(f"{where}: the message does not name the host {host}: {message[:300]}")


def test_revoked_token(tmp_path: Path, airflow_db: Path, tally, capfd, monkeypatch) -> None:
    import dagster as dg
    from airflow.utils.state import DagRunState

    from dagster_air import AirStage, AirWorkspace, build_air_assets

    token = "revoked-" + "x" * 24
    ws = start_local_workspace(
        data_dir=tmp_path / "workspace", token=["admin-token", token], retry_interval_s=0.05
    )
    ws.token = "admin-token"  # admin calls keep working
    try:
        ws.admin.revoke_token(token)
        monkeypatch.setenv("AIRFLOW_CONN_DATABRICKS_DEFAULT", connection_json(ws.host, token))
        for trial in range(trials(1, 4)):
            # The client.
            tally.trials += 1
            started = time.time()
            try:
                with AirClient(ws.host, token) as client:
                    client.whoami()
                tally.fail(f"trial {trial}: a revoked token was accepted")
            except AuthError as exc:
                _check_message(tally, "client", str(exc), ws.host, token)
            requests = [e for e in ws.admin.request_log(limit=10_000) if e["time"] >= started]
            if len(requests) != 1:
                tally.unexpected_retries += len(requests) - 1
                tally.fail(f"trial {trial}: {len(requests)} requests for a revoked token")
            # A real Airflow task with retries=2: one try, a configuration error.
            tally.trials += 1
            started = time.time()
            capfd.readouterr()
            run = reliability_dag("reliability_retry").test(run_conf={"command": "echo never"})
            out = "".join(capfd.readouterr())
            ti = run.get_task_instance("run")
            if run.state != DagRunState.FAILED:
                tally.fail(f"trial {trial}: the Airflow task ended {run.state}")
            if ti is not None and ti.try_number != 1:
                tally.unexpected_retries += ti.try_number - 1
                tally.fail(f"trial {trial}: the Airflow task was tried {ti.try_number} times")
            if token in out:
                tally.leaks += 1
                tally.fail(f"trial {trial}: the Airflow task log contains the token")
            if "AirConfigurationError" not in out or ws.host not in out:
                tally.fail(f"trial {trial}: the Airflow failure does not name the host")
            requests = [e for e in ws.admin.request_log(limit=10_000) if e["time"] >= started]
            if len(requests) != 1:
                tally.unexpected_retries += max(len(requests) - 1, 0)
                tally.fail(f"trial {trial}: Airflow sent {len(requests)} requests")
            # Dagster.
            tally.trials += 1
            started = time.time()
            assets = build_air_assets(
                AirStage(
                    key=f"r7_revoked_{trial}",
                    workload={
                        "experiment_name": f"r7-{trial}",
                        "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
                        "max_retries": 0,
                        "command": "echo never",
                    },
                )
            )
            resource = AirWorkspace(host=ws.host, token=token, poll_interval=0.2)
            with dg.DagsterInstance.ephemeral() as instance:
                result = dg.materialize(
                    [assets],
                    resources={"air_workspace": resource},
                    instance=instance,
                    raise_on_error=False,
                )
                failures = [e for e in result.all_events if e.is_step_failure]
                text = json.dumps([str(e.step_failure_data.error) for e in failures], default=str)
            if result.success or not failures:
                tally.fail(f"trial {trial}: the Dagster run did not fail")
            _check_message(tally, "dagster", text, ws.host, token)
            requests = [e for e in ws.admin.request_log(limit=10_000) if e["time"] >= started]
            if len(requests) != 1:
                tally.unexpected_retries += max(len(requests) - 1, 0)
                tally.fail(f"trial {trial}: Dagster sent {len(requests)} requests")
    finally:
        ws.stop()
