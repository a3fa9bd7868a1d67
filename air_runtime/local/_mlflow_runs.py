"""What training code logs to its MLflow run: params, metric histories, tags and the run's
status, as the MLflow tracking REST API keeps them (https://mlflow.org/docs/latest/rest-api.html,
https://docs.databricks.com/api/workspace/experiments). The run itself is the task attempt's
(`ai_runtime_task_output.mlflow_run_id`); only what is logged to it lives here.

A param is written once: logging it again with another value is refused, as MLflow refuses
it. A metric keeps every point; `runs/get` shows the newest point of each key (the largest
step, then the latest timestamp, as MLflow's latest-metric rule)."""

from __future__ import annotations

import secrets
import sqlite3
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from air_runtime import _progress
from air_runtime.local._errors import invalid
from air_runtime.local._security import private_dir, write_private
from air_runtime.local._store import Store

_SCHEMA = """
CREATE TABLE IF NOT EXISTS mlflow_params (
    mlflow_run_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
    PRIMARY KEY (mlflow_run_id, key)
);
CREATE TABLE IF NOT EXISTS mlflow_tags (
    mlflow_run_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
    PRIMARY KEY (mlflow_run_id, key)
);
CREATE TABLE IF NOT EXISTS mlflow_metrics (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    mlflow_run_id TEXT NOT NULL, key TEXT NOT NULL, value REAL NOT NULL,
    timestamp INTEGER NOT NULL, step INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS mlflow_metrics_key ON mlflow_metrics (mlflow_run_id, key, seq);
CREATE TABLE IF NOT EXISTS mlflow_status (
    mlflow_run_id TEXT PRIMARY KEY, status TEXT NOT NULL, end_time INTEGER, run_name TEXT
);
"""

# MLflow's documented limits: keys up to 250 characters, param values up to 6000.
_MAX_KEY = 250
_MAX_PARAM_VALUE = 6000
_MAX_TAG_VALUE = 8000
# log-batch: at most 1000 metrics, 100 params, 100 tags per request (MLflow's limits).
_BATCH_LIMITS = {"metrics": 1000, "params": 100, "tags": 100}
RUN_STATUSES = ("RUNNING", "SCHEDULED", "FINISHED", "FAILED", "KILLED")


@dataclass(frozen=True)
class MetricPoint:
    key: str
    value: float
    timestamp: int
    step: int

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "value": self.value,
            "timestamp": self.timestamp,
            "step": self.step,
        }


def _key(item: dict[str, Any], what: str) -> str:
    key = item.get("key")
    if not isinstance(key, str) or not key:
        raise invalid(f"{what} key is required.")
    if len(key) > _MAX_KEY:
        raise invalid(f"{what} key {key[:40]!r}... is longer than {_MAX_KEY} characters.")
    return key


def _metric(item: dict[str, Any]) -> MetricPoint:
    key = _key(item, "Metric")
    value = item.get("value")
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise invalid(f"Metric {key!r} needs a numeric value, got {value!r}.")
    try:
        number = float(value)  # "NaN" and "Infinity" arrive as strings in JSON
    except ValueError:
        raise invalid(f"Metric {key!r} needs a numeric value, got {value!r}.") from None
    timestamp, step = item.get("timestamp"), item.get("step", 0)
    try:
        return MetricPoint(key, number, int(timestamp), int(step or 0))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise invalid(f"Metric {key!r} needs an integer timestamp and step.") from None


def _pair(item: dict[str, Any], what: str, limit: int) -> tuple[str, str]:
    key = _key(item, what)
    value = item.get("value")
    if value is None:
        value = ""
    value = str(value)
    if len(value) > limit:
        raise invalid(f"{what} {key!r} has a value longer than {limit} characters.")
    return key, value


class MlflowRuns:
    """The logged data of every MLflow run of the workspace, in the workspace's store."""

    def __init__(self, store: Store) -> None:
        self._store = store
        with store.transaction() as db:
            for statement in _SCHEMA.strip().split(";"):
                if statement.strip():
                    db.execute(statement)

    def log_batch(
        self,
        run_id: str,
        *,
        metrics: list[dict[str, Any]] = (),  # type: ignore[assignment]
        params: list[dict[str, Any]] = (),  # type: ignore[assignment]
        tags: list[dict[str, Any]] = (),  # type: ignore[assignment]
    ) -> None:
        for name, items in (("metrics", metrics), ("params", params), ("tags", tags)):
            if not isinstance(items, list | tuple) or not all(isinstance(i, dict) for i in items):
                raise invalid(f"{name} must be a list of objects.")
            if len(items) > _BATCH_LIMITS[name]:
                raise invalid(f"A batch holds at most {_BATCH_LIMITS[name]} {name}.")
        points = [_metric(m) for m in metrics]
        pairs = [_pair(p, "Param", _MAX_PARAM_VALUE) for p in params]
        tag_pairs = [_pair(t, "Tag", _MAX_TAG_VALUE) for t in tags]
        with self._store.transaction() as db:
            for key, value in pairs:
                self._put_param(db, run_id, key, value)
            for key, value in tag_pairs:
                db.execute(
                    "INSERT OR REPLACE INTO mlflow_tags (mlflow_run_id, key, value) VALUES (?, ?, ?)",
                    (run_id, key, value),
                )
            db.executemany(
                "INSERT INTO mlflow_metrics (mlflow_run_id, key, value, timestamp, step)"
                " VALUES (?, ?, ?, ?, ?)",
                [(run_id, p.key, p.value, p.timestamp, p.step) for p in points],
            )

    @staticmethod
    def _put_param(db: sqlite3.Connection, run_id: str, key: str, value: str) -> None:
        row = db.execute(
            "SELECT value FROM mlflow_params WHERE mlflow_run_id = ? AND key = ?", (run_id, key)
        ).fetchone()
        if row is None:
            db.execute(
                "INSERT INTO mlflow_params (mlflow_run_id, key, value) VALUES (?, ?, ?)",
                (run_id, key, value),
            )
        elif row["value"] != value:
            raise invalid(
                f"Changing param values is not allowed. Param with key='{key}' was already "
                f"logged with value='{row['value']}' for run ID='{run_id}'. Attempted "
                f"logging new value '{value}'."
            )

    def params(self, run_id: str) -> list[dict[str, str]]:
        rows = self._store.query(
            "SELECT key, value FROM mlflow_params WHERE mlflow_run_id = ? ORDER BY key", (run_id,)
        )
        return [{"key": r["key"], "value": r["value"]} for r in rows]

    def tags(self, run_id: str) -> list[dict[str, str]]:
        rows = self._store.query(
            "SELECT key, value FROM mlflow_tags WHERE mlflow_run_id = ? ORDER BY key", (run_id,)
        )
        return [{"key": r["key"], "value": r["value"]} for r in rows]

    def latest_metrics(self, run_id: str) -> list[MetricPoint]:
        rows = self._store.query(
            "SELECT key, value, timestamp, step FROM mlflow_metrics WHERE mlflow_run_id = ?"
            " ORDER BY key, step, timestamp, seq",
            (run_id,),
        )
        latest: dict[str, MetricPoint] = {}
        for r in rows:
            latest[r["key"]] = MetricPoint(r["key"], r["value"], r["timestamp"], r["step"])
        return list(latest.values())

    def history(
        self, run_id: str, key: str, after: int, limit: int
    ) -> tuple[list[MetricPoint], int]:
        """Points of one metric in the order they were logged, from sequence ``after`` on;
        with the sequence to continue from (0 when there are no more)."""
        rows = self._store.query(
            "SELECT seq, key, value, timestamp, step FROM mlflow_metrics"
            " WHERE mlflow_run_id = ? AND key = ? AND seq > ? ORDER BY seq LIMIT ?",
            (run_id, key, after, limit + 1),
        )
        points = [MetricPoint(r["key"], r["value"], r["timestamp"], r["step"]) for r in rows]
        more = len(rows) > limit
        return points[:limit], (int(rows[limit - 1]["seq"]) if more else 0)

    def progress(self, run_id: str) -> _progress.TrainingProgress | None:
        """The run's progress as the CLI estimates it from what it logged (eta.go)."""
        params = {p["key"]: p["value"] for p in self.params(run_id)}
        if not _progress.has_total(params):
            return None
        rows = self._store.query(
            "SELECT value, timestamp, step FROM mlflow_metrics"
            " WHERE mlflow_run_id = ? AND key = ? ORDER BY seq",
            (run_id, _progress.PROGRESS_METRIC),
        )
        points = [_progress.MetricPoint(r["value"], r["step"], r["timestamp"]) for r in rows]
        return _progress.compute_progress(params, points)

    def set_status(
        self, run_id: str, status: str | None, end_time: int | None, run_name: str | None
    ) -> None:
        if status is not None and status not in RUN_STATUSES:
            raise invalid(f"status must be one of {', '.join(RUN_STATUSES)}, got {status!r}.")
        with self._store.transaction() as db:
            row = db.execute(
                "SELECT * FROM mlflow_status WHERE mlflow_run_id = ?", (run_id,)
            ).fetchone()
            db.execute(
                "INSERT OR REPLACE INTO mlflow_status (mlflow_run_id, status, end_time, run_name)"
                " VALUES (?, ?, ?, ?)",
                (
                    run_id,
                    status or (row["status"] if row else "RUNNING"),
                    end_time if end_time is not None else (row["end_time"] if row else None),
                    run_name if run_name is not None else (row["run_name"] if row else None),
                ),
            )

    def status(self, run_id: str) -> sqlite3.Row | None:
        rows = self._store.query("SELECT * FROM mlflow_status WHERE mlflow_run_id = ?", (run_id,))
        return rows[0] if rows else None


_BY_STORE: weakref.WeakKeyDictionary[Store, MlflowRuns] = weakref.WeakKeyDictionary()


def mlflow_runs(store: Store) -> MlflowRuns:
    """The MLflow data of the workspace whose state is ``store`` (its tables made once)."""
    runs = _BY_STORE.get(store)
    if runs is None:
        runs = _BY_STORE[store] = MlflowRuns(store)
    return runs


def rank_tracking_env(
    store: Store,
    host: str,
    principal: str,
    ids: dict[str, str],
    lifetime_s: float,
    folder: Path,
) -> tuple[dict[str, str], str]:
    """The variables a rank's MLflow client logs to its attempt's run with, and the token
    they lead to. The MLflow client reads `MLFLOW_TRACKING_URI=databricks` as "the
    workspace the Databricks SDK's default auth finds" (mlflow.utils.databricks_utils) and
    resumes `MLFLOW_RUN_ID` in `mlflow.start_run()`; the SDK finds this workspace and the
    token in the config file DATABRICKS_CONFIG_FILE names (its DEFAULT profile), written
    0600 in the attempt's private folder. The token is the attempt's own, issued here and
    revoked when the attempt ends, and is not in the environment: a variable named
    DATABRICKS_TOKEN in a rank is never a credential of the machine running the workspace."""
    token = f"dapi-rank-{secrets.token_hex(16)}"
    store.add_access_token(token, principal, time.time() + lifetime_s)
    config = private_dir(folder) / "databrickscfg"
    write_private(config, f"[DEFAULT]\nhost = {host}\ntoken = {token}\n")
    env = {
        "MLFLOW_TRACKING_URI": "databricks",
        "MLFLOW_EXPERIMENT_ID": ids["mlflow_experiment_id"],
        "MLFLOW_RUN_ID": ids["mlflow_run_id"],
        "DATABRICKS_HOST": host,
        "DATABRICKS_CONFIG_FILE": str(config),
    }
    return env, token


def revoke_rank_token(store: Store, token: str) -> None:
    store.execute("DELETE FROM access_tokens WHERE token = ?", (token,))
