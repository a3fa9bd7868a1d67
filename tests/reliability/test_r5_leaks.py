"""R5 secret leakage: an Airflow connection secret, a Dagster ``EnvVar`` secret and the
workspace token flow through full runs (sync and deferred Airflow tasks, a Dagster asset);
none of the values appears in Airflow task logs, XComs, rendered fields (or anywhere in
Airflow's metadata database), the Dagster event log and compute logs, the uploaded files
(read back over the workspace API), the submit bodies, or the local workspace's request log
and data folder (everything but its secret store).

The workloads prove they received the secret by printing its SHA-256, never the value.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import pytest
from conftest import trials
from helpers import (
    PRINT_SECRET_DIGEST,
    LeakScan,
    client_for,
    digest,
    reliability_dag,
    sqlite_text,
    workspace_data_text,
)

from air_runtime.local import start_local_workspace

pytestmark = [pytest.mark.row("R5"), pytest.mark.timeout(900)]


def _workspace_files(client: Any, root: str) -> dict[str, bytes]:
    """Every file under ``root``, read back through workspace/list and workspace/export."""
    import base64

    found: dict[str, bytes] = {}
    folders = [root]
    while folders:
        folder = folders.pop()
        body = client._run(
            client._core.call("GET", "/api/2.0/workspace/list", params={"path": folder})
        )
        for obj in body.get("objects") or []:
            if obj.get("object_type") == "DIRECTORY":
                folders.append(obj["path"])
            else:
                exported = client._run(
                    client._core.call(
                        "GET", "/api/2.0/workspace/export", params={"path": obj["path"]}
                    )
                )
                found[obj["path"]] = base64.b64decode(exported.get("content") or "")
    return found


def test_leaks(tmp_path: Path, airflow_db: Path, tally, capfd, monkeypatch) -> None:
    import dagster as dg
    from airflow.utils.state import DagRunState

    from dagster_air import AirStage, AirWorkspace, build_air_assets

    values = {
        "workspace_token": "ws-token-" + secrets.token_hex(16),
        "airflow_secret": "af-secret-" + secrets.token_hex(16),
        "dagster_secret": "dg-secret-" + secrets.token_hex(16),
    }
    ws = start_local_workspace(
        data_dir=tmp_path / "workspace",
        token=values["workspace_token"],
        retry_interval_s=0.05,
    )
    scan = LeakScan(tally, values)

    try:
        monkeypatch.setenv(
            "AIRFLOW_CONN_DATABRICKS_DEFAULT",
            json.dumps({"conn_type": "databricks", "host": ws.host, "password": ws.token}),
        )
        monkeypatch.setenv(
            "AIRFLOW_CONN_RELIABILITY_HF",
            json.dumps({"conn_type": "generic", "password": values["airflow_secret"]}),
        )
        monkeypatch.setenv("R5_WS_TOKEN", values["workspace_token"])
        monkeypatch.setenv("R5_DG_SECRET", values["dagster_secret"])
        digests: list[str] = []
        for trial in range(trials(1, 3)):
            # Airflow, in the worker and deferred.
            for dag_id in ("reliability_secrets", "reliability_secrets_deferred"):
                tally.trials += 1
                capfd.readouterr()
                run = reliability_dag(dag_id).test(run_conf={"command": PRINT_SECRET_DIGEST})
                out = "".join(capfd.readouterr())
                scan(f"airflow task log ({dag_id})", out)
                if run.state != DagRunState.SUCCESS:
                    tally.fail(f"trial {trial}: {dag_id} ended {run.state}")
                digests.append(digest(values["airflow_secret"]))
            # Dagster: the workspace token and a secret as EnvVars.
            tally.trials += 1
            home = tmp_path / f"dagster-{trial}"
            home.mkdir()
            assets = build_air_assets(
                AirStage(
                    key=f"r5_secret_{trial}",
                    workload={
                        "experiment_name": f"r5-dagster-{trial}",
                        "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
                        "max_retries": 0,
                        "command": PRINT_SECRET_DIGEST,
                    },
                ),
                secret_env={"HF_TOKEN": dg.EnvVar("R5_DG_SECRET")},
            )
            resource = AirWorkspace(
                host=ws.host, token=dg.EnvVar("R5_WS_TOKEN"), poll_interval=0.2, request_budget=50
            )
            capfd.readouterr()
            with dg.DagsterInstance.local_temp(str(home)) as instance:
                result = dg.materialize(
                    [assets], resources={"air_workspace": resource}, instance=instance
                )
                scan(
                    "dagster event log",
                    "\n".join(dg.serialize_value(e) for e in instance.all_logs(result.run_id)),
                )
            scan("dagster console output", "".join(capfd.readouterr()))
            for path in home.rglob("*"):
                if path.is_file():
                    scan(f"dagster home {path.name}", path.read_bytes().decode("utf-8", "replace"))
            if not result.success:
                tally.fail(f"trial {trial}: the Dagster run failed")
            digests.append(digest(values["dagster_secret"]))

        # Airflow's logs folder and metadata database (XComs, rendered fields, triggers...).
        for path in (airflow_db / "logs").rglob("*") if (airflow_db / "logs").exists() else []:
            if path.is_file():
                scan(f"airflow log file {path.name}", path.read_text(errors="replace"))
        scan("airflow metadata database", sqlite_text(airflow_db / "airflow.db"))

        with client_for(ws) as client:
            user = client.whoami().user_name
            for path, content in _workspace_files(client, f"/Workspace/Users/{user}").items():
                scan(f"uploaded file {path}", content.decode("utf-8", "replace"))
            runs, _ = client.list_runs(active_only=False)
            bodies = "\n".join(
                json.dumps(
                    client._run(
                        client._core.call(
                            "GET", "/api/2.2/jobs/runs/get", params={"run_id": r.run_id}
                        )
                    )
                )
                for r in runs
            )
            scan("runs/get (submitted settings)", bodies)
            logs = "\n".join(rec.body for r in runs for rec in client.iter_logs(r.run_id, node=0))
        scan("request log (admin API)", json.dumps(ws.admin.request_log(limit=10_000)))
        for name, text in workspace_data_text(ws.data_dir).items():
            scan(f"workspace data {name}", text)
        # The runs did get the secrets (by digest).
        missing = [d for d in set(digests) if d not in logs]
        if missing:
            tally.fail(f"runs did not receive the secrets: digests {missing} not in node logs")
    finally:
        ws.stop()
    tally.notes.update(secret_values=len(values))
    scan.report()
