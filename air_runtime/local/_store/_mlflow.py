"""The MLflow tables: experiments (with their access control lists), and what training code
logs to an MLflow run: params, tags, every metric point, and the status it set."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from air_runtime.local._store._database import Database
from air_runtime.local._store._records import MetricPoint, MlflowStatus, acl_of


class ParamConflict(Exception):
    """A param logged again with another value; nothing of the batch was written."""

    def __init__(self, key: str, logged: str, value: str) -> None:
        super().__init__(key)
        self.key, self.logged, self.value = key, logged, value


class MlflowTables:
    def __init__(self, db: Database) -> None:
        self._db = db

    # --- experiments ------------------------------------------------------------------

    def add_experiment(self, experiment_id: str, path: str) -> None:
        """Record the experiment (once: a later task of the same experiment finds it)."""
        self._db.execute(
            "INSERT OR IGNORE INTO experiments (experiment_id, path) VALUES (?, ?)",
            (experiment_id, path),
        )

    def experiment_path(self, experiment_id: str) -> str | None:
        rows = self._db.query(
            "SELECT path FROM experiments WHERE experiment_id = ?", (experiment_id,)
        )
        return str(rows[0]["path"]) if rows else None

    def experiment_acl(self, experiment_id: str) -> list[dict[str, Any]] | None:
        """The experiment's access control list; None when no such experiment."""
        rows = self._db.query(
            "SELECT acl FROM experiments WHERE experiment_id = ?", (experiment_id,)
        )
        return acl_of(rows[0]) if rows else None

    def update_experiment_acl(
        self, experiment_id: str, change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
    ) -> list[dict[str, Any]]:
        """Replace the experiment's list with ``change`` of it, in one transaction."""
        with self._db.transaction() as db:
            row = db.execute(
                "SELECT acl FROM experiments WHERE experiment_id = ?", (experiment_id,)
            ).fetchone()
            acl = change(acl_of(row))
            db.execute(
                "UPDATE experiments SET acl = ? WHERE experiment_id = ?",
                (json.dumps(acl), experiment_id),
            )
        return acl

    # --- logged data ------------------------------------------------------------------

    def log(
        self,
        run_id: str,
        params: list[tuple[str, str]],
        tags: list[tuple[str, str]],
        points: list[MetricPoint],
    ) -> None:
        """Write a batch at once; a param already logged with another value raises
        `ParamConflict` and writes nothing."""
        with self._db.transaction() as db:
            for key, value in params:
                row = db.execute(
                    "SELECT value FROM mlflow_params WHERE mlflow_run_id = ? AND key = ?",
                    (run_id, key),
                ).fetchone()
                if row is None:
                    db.execute(
                        "INSERT INTO mlflow_params (mlflow_run_id, key, value) VALUES (?, ?, ?)",
                        (run_id, key, value),
                    )
                elif row["value"] != value:
                    raise ParamConflict(key, str(row["value"]), value)
            for key, value in tags:
                db.execute(
                    "INSERT OR REPLACE INTO mlflow_tags (mlflow_run_id, key, value) VALUES (?, ?, ?)",
                    (run_id, key, value),
                )
            db.executemany(
                "INSERT INTO mlflow_metrics (mlflow_run_id, key, value, timestamp, step)"
                " VALUES (?, ?, ?, ?, ?)",
                [(run_id, p.key, p.value, p.timestamp, p.step) for p in points],
            )

    def params(self, run_id: str) -> list[tuple[str, str]]:
        rows = self._db.query(
            "SELECT key, value FROM mlflow_params WHERE mlflow_run_id = ? ORDER BY key", (run_id,)
        )
        return [(str(r["key"]), str(r["value"])) for r in rows]

    def tags(self, run_id: str) -> list[tuple[str, str]]:
        rows = self._db.query(
            "SELECT key, value FROM mlflow_tags WHERE mlflow_run_id = ? ORDER BY key", (run_id,)
        )
        return [(str(r["key"]), str(r["value"])) for r in rows]

    def points(self, run_id: str, key: str | None = None) -> list[MetricPoint]:
        """The run's metric points (of one key, when given): by key, step, timestamp and
        the order they were logged in; of one key, in the order they were logged."""
        if key is None:
            rows = self._db.query(
                "SELECT key, value, timestamp, step FROM mlflow_metrics WHERE mlflow_run_id = ?"
                " ORDER BY key, step, timestamp, seq",
                (run_id,),
            )
        else:
            rows = self._db.query(
                "SELECT key, value, timestamp, step FROM mlflow_metrics"
                " WHERE mlflow_run_id = ? AND key = ? ORDER BY seq",
                (run_id, key),
            )
        return [MetricPoint(r["key"], r["value"], r["timestamp"], r["step"]) for r in rows]

    def history(
        self, run_id: str, key: str, after: int, limit: int
    ) -> tuple[list[MetricPoint], int]:
        """Points of one metric in the order they were logged, from sequence ``after`` on;
        with the sequence to continue from (0 when there are no more)."""
        rows = self._db.query(
            "SELECT seq, key, value, timestamp, step FROM mlflow_metrics"
            " WHERE mlflow_run_id = ? AND key = ? AND seq > ? ORDER BY seq LIMIT ?",
            (run_id, key, after, limit + 1),
        )
        points = [MetricPoint(r["key"], r["value"], r["timestamp"], r["step"]) for r in rows]
        more = len(rows) > limit
        return points[:limit], (int(rows[limit - 1]["seq"]) if more else 0)

    def set_status(
        self, run_id: str, status: str | None, end_time: int | None, run_name: str | None
    ) -> None:
        """Set what is given; what is None keeps its value (a new run starts RUNNING)."""
        with self._db.transaction() as db:
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

    def status(self, run_id: str) -> MlflowStatus | None:
        rows = self._db.query("SELECT * FROM mlflow_status WHERE mlflow_run_id = ?", (run_id,))
        if not rows:
            return None
        return MlflowStatus(str(rows[0]["status"]), rows[0]["end_time"], rows[0]["run_name"])
