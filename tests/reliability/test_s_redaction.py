"""S7 secret redaction: a failing workload prints an orchestrator secret (plainly, base64,
URL-safe base64, URL-encoded and JSON-escaped) and exits 1. The failure message carries the
run's last log lines, so without redaction the value would reach the orchestrator. Counted
in both orchestrators, for every way of waiting: an Airflow task waiting in the worker
(streaming the node log), one deferred to the triggerer, the two stages of a workflow run
(one in the worker, one deferred), and a Dagster asset.

Each occurrence of the value or of one of its encodings is a leak, wherever it is: task log
events as Airflow emits them (captured before Airflow's own secrets masker runs, so the
count does not depend on it), console output, the task's exception, XComs, trigger events
and every other table of Airflow's metadata database, the Dagster event log, failure
description, metadata and compute logs. The node logs are the platform's: the workload did
print the value there, which proves every trial printed it.
"""

from __future__ import annotations

import base64
import contextlib
import importlib.util
import json
import secrets
import sys
import traceback
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
from conftest import DAGS, trials
from helpers import LeakScan, all_runs, client_for, sqlite_text

from air_runtime._errors import AirError
from air_runtime.local import start_local_workspace

pytestmark = [pytest.mark.row("S7"), pytest.mark.timeout(1800)]

# Prints the secret in the encodings a real workload might use, then fails.
PRINT_SECRET_ENCODINGS = "\n".join(
    [
        "printf 'plain %s\\n' \"$HF_TOKEN\"",
        'printf \'base64 %s\\n\' "$(printf %s "$HF_TOKEN" | base64 -w0)"',
        "printf 'base64url %s\\n' \"$(printf %s \"$HF_TOKEN\" | base64 -w0 | tr '+/' '-_' "
        "| tr -d '=')\"",
        'python3 -c \'import json, os, urllib.parse as u; v = os.environ["HF_TOKEN"]; '
        'print("url", u.quote(v, safe="")); print("url_plus", u.quote_plus(v)); '
        'print("json", json.dumps(v))\'',
        'echo "failing on purpose"',
        "exit 1",
    ]
)


def secret_value(label: str) -> str:
    # '/', '+', ' ', '&', '=' and '"' make the URL, base64 and JSON forms all differ.
    return f's7-{label}/{secrets.token_hex(12)}+a b&c="q"é'


def encodings(value: str) -> dict[str, str]:
    """What the workload prints, by name (each is counted where it appears)."""
    raw = value.encode()
    return {
        "plain": value,
        "base64": base64.b64encode(raw).decode(),
        "base64url": base64.urlsafe_b64encode(raw).decode().rstrip("="),
        "url": quote(value, safe=""),
        "url_plus": quote_plus(value),
        "json": json.dumps(value)[1:-1],
    }


def redaction_dag(dag_id: str) -> Any:
    module = sys.modules.get("redaction_dags")
    if module is None:
        spec = importlib.util.spec_from_file_location("redaction_dags", DAGS / "redaction_dags.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["redaction_dags"] = module
        spec.loader.exec_module(module)
    for value in vars(module).values():
        if getattr(value, "dag_id", None) == dag_id and hasattr(value, "task_dict"):
            return value
    raise KeyError(dag_id)


class StructlogCapture:
    """Every log event emitted while active, formatted as text, before Airflow's masker."""

    def __enter__(self) -> StructlogCapture:
        import structlog

        self.capture = structlog.testing.LogCapture()
        self._previous = structlog.get_config()["processors"]
        structlog.configure(processors=[structlog.processors.format_exc_info, self.capture])
        return self

    def __exit__(self, *exc: object) -> None:
        import structlog

        structlog.configure(processors=self._previous)

    def text(self) -> str:
        lines = []
        for entry in self.capture.entries:
            event = str(entry.get("event", ""))
            args = entry.get("positional_args")
            if args:
                try:
                    event = event % tuple(args)
                except (TypeError, ValueError):
                    event = " ".join([event, *map(str, args)])
            lines.append(event)
            for key, value in entry.items():
                if key in ("event", "positional_args"):
                    continue
                if isinstance(value, BaseException):
                    lines.append("".join(traceback.format_exception(value)))
                else:
                    lines.append(f"{key}={value}")
        return "\n".join(lines)


def _xcom_text(dag_id: str) -> str:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.scalars(select(XComModel).where(XComModel.dag_id == dag_id)).all()
        return "\n".join(str(row.value) for row in rows)


def _task_states(dag_run: Any) -> dict[str, str]:
    from airflow.utils.session import create_session

    with create_session() as session:
        return {
            ti.task_id: str(getattr(ti.state, "value", ti.state))
            for ti in dag_run.get_task_instances(session=session)
        }


AIRFLOW_CASES = {
    # dag id -> the tasks that must fail (the workflow's submit task succeeds).
    "redaction_sync": ("run",),
    "redaction_deferred": ("run",),
    "redaction_workflow": ("pipeline.stage_sync", "pipeline.stage_deferred"),
}


def _check_printed(tally: Any, ws: Any, printed: dict[str, str]) -> None:
    """The workloads did print every value: the platform's node logs have them."""
    with client_for(ws) as client:
        logs = []
        for run in all_runs(client):
            run_ids = [run.run_id]
            run_ids += [t.run_id for t in client.get_run(run.run_id).tasks if t.run_id]
            for run_id in run_ids:
                with contextlib.suppress(AirError):
                    logs.extend(rec.body for rec in client.iter_logs(run_id, node=0))
    node_logs = "\n".join(logs)
    not_printed = [label for label, value in printed.items() if value not in node_logs]
    if not_printed:
        tally.fail(f"workloads did not print their secret: {not_printed}")


def _report(tally: Any, printed: dict[str, str], locations: dict[str, Any], paths: Any) -> None:
    tally.notes.update(
        secret_values_printed=len(printed),
        encodings_per_value=len(encodings("x" * 8)),
        paths=list(paths),
        locations=locations,
    )
    if locations:
        tally.fail(f"secret values found in: {locations}")


def test_airflow(tmp_path: Path, airflow_db: Path, tally, capfd, monkeypatch) -> None:
    ws = start_local_workspace(data_dir=tmp_path / "workspace", retry_interval_s=0.05)
    printed: dict[str, str] = {}  # every value a workload printed, by trial and path
    locations: dict[str, dict[str, int]] = {}
    try:
        monkeypatch.setenv(
            "AIRFLOW_CONN_DATABRICKS_DEFAULT",
            json.dumps({"conn_type": "databricks", "host": ws.host, "password": ws.token}),
        )
        for trial in range(trials(1, 10)):
            for dag_id, failing in AIRFLOW_CASES.items():
                tally.trials += 1
                value = secret_value(f"{trial}-{dag_id}")
                printed[f"{trial}:{dag_id}"] = value
                scan = LeakScan(tally, encodings(value))
                monkeypatch.setenv(
                    "AIRFLOW_CONN_REDACTION_SECRET",
                    json.dumps({"conn_type": "generic", "password": value}),
                )
                capfd.readouterr()
                with StructlogCapture() as events:
                    run = redaction_dag(dag_id).test(run_conf={"command": PRINT_SECRET_ENCODINGS})
                logged = events.text()
                scan(f"{dag_id}: task log events", logged)
                scan(f"{dag_id}: console", "".join(capfd.readouterr()))
                scan(f"{dag_id}: XComs", _xcom_text(dag_id))
                states = _task_states(run)
                for task_id in failing:
                    if states.get(task_id) != "failed":
                        tally.fail(f"trial {trial}: {dag_id} task {task_id} is {states}")
                # The failure message did carry the log tail, redacted.
                shown = logged.count("plain ***")
                if shown < len(failing):
                    tally.fail(f"trial {trial}: {dag_id}: 'plain ***' logged {shown} times")
                tally.notes["redacted_lines_seen"] = tally.notes.get(
                    "redacted_lines_seen", 0
                ) + logged.count("***")
                locations.update({f"{trial}:{k}": v for k, v in scan.locations.items()})

        # Airflow's metadata database: trigger events, next_kwargs, XComs, rendered fields...
        database = airflow_db / "airflow.db"
        if database.exists():
            text = sqlite_text(database)
            for label, value in printed.items():
                scan = LeakScan(tally, encodings(value))
                scan(f"airflow metadata database ({label})", text)
                locations.update(scan.locations)
        else:
            tally.notes["metadata_database"] = "not SQLite: not scanned"
        _check_printed(tally, ws, printed)
    finally:
        ws.stop()
    _report(tally, printed, locations, AIRFLOW_CASES)


def test_dagster(tmp_path: Path, tally, capfd, monkeypatch) -> None:
    import dagster as dg

    from dagster_air import AirStage, AirWorkspace, build_air_assets

    ws = start_local_workspace(data_dir=tmp_path / "workspace", retry_interval_s=0.05)
    printed: dict[str, str] = {}
    locations: dict[str, dict[str, int]] = {}
    try:
        for trial in range(trials(1, 10)):
            tally.trials += 1
            value = secret_value(f"{trial}-dagster")
            printed[f"{trial}:dagster"] = value
            scan = LeakScan(tally, encodings(value))
            monkeypatch.setenv("S7_DG_SECRET", value)
            home = tmp_path / f"dagster-{trial}"
            home.mkdir()
            assets = build_air_assets(
                AirStage(
                    key=f"s7_redaction_{trial}",
                    workload={
                        "experiment_name": f"s7-dagster-{trial}",
                        "compute": {"accelerator_type": "GPU_1xA10", "num_accelerators": 1},
                        "max_retries": 0,
                        "command": PRINT_SECRET_ENCODINGS,
                    },
                ),
                secret_env={"HF_TOKEN": dg.EnvVar("S7_DG_SECRET")},
            )
            resource = AirWorkspace(
                host=ws.host, token=ws.token, poll_interval=0.2, request_budget=50
            )
            capfd.readouterr()
            with dg.DagsterInstance.local_temp(str(home)) as instance:
                result = dg.materialize(
                    [assets],
                    resources={"air_workspace": resource},
                    instance=instance,
                    raise_on_error=False,
                )
                scan(
                    "dagster event log",
                    "\n".join(dg.serialize_value(e) for e in instance.all_logs(result.run_id)),
                )
                failures = [e.step_failure_data for e in result.all_events if e.is_step_failure]
                failure_text = "\n".join(dg.serialize_value(f) for f in failures)
                scan("dagster failure (description, metadata)", failure_text)
                materializations = [
                    e.event_specific_data for e in result.all_events if e.is_step_materialization
                ]
                scan("dagster metadata", "\n".join(map(str, materializations)))
            scan("dagster console", "".join(capfd.readouterr()))
            for path in home.rglob("*"):
                if path.is_file():
                    scan(f"dagster home {path.name}", path.read_bytes().decode("utf-8", "replace"))
            if result.success or not failures:
                tally.fail(f"trial {trial}: the Dagster run did not fail")
            elif "plain ***" not in failure_text:
                tally.fail(f"trial {trial}: the failure did not show the redacted log tail")
            locations.update({f"{trial}:{k}": v for k, v in scan.locations.items()})
        _check_printed(tally, ws, printed)
    finally:
        ws.stop()
    _report(tally, printed, locations, ["dagster asset"])
