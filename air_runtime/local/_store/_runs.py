"""The `runs`, `tasks` and `repairs` tables: submitted runs, their task runs (every attempt
of every task) and their repairs."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from air_runtime.local._store._database import Database
from air_runtime.local._store._records import Repair, Run, TaskRun, now_ms


class RunTables:
    def __init__(self, db: Database) -> None:
        self._db = db

    def create(self, body: dict[str, Any], token: str | None, mode: str) -> tuple[int, bool]:
        """Create the run and its first task attempts; an idempotency token seen before
        returns the existing run id instead (forever, also after the run ended)."""
        with self._db.transaction() as db:
            if token:
                row = db.execute(
                    "SELECT run_id FROM runs WHERE idempotency_token = ?", (token,)
                ).fetchone()
                if row is not None:
                    return int(row["run_id"]), False
            run_id = self._db.new_id(db)
            db.execute(
                "INSERT INTO runs (run_id, idempotency_token, run_name, body, life_cycle_state,"
                " state_message, start_time, mode) VALUES (?, ?, ?, ?, 'PENDING', ?, ?, ?)",
                (
                    run_id,
                    token or None,
                    str(body.get("run_name") or "Untitled"),
                    json.dumps(body),
                    "Waiting for the local workspace to start the run.",
                    now_ms(),
                    mode,
                ),
            )
            for position, task in enumerate(body.get("tasks") or []):
                self._insert_task(db, run_id, str(task["task_key"]), position, 0, "PENDING", "")
            return run_id, True

    def _insert_task(
        self,
        db: sqlite3.Connection,
        run_id: int,
        task_key: str,
        position: int,
        attempt: int,
        life_cycle_state: str,
        message: str,
        repair_id: int = 0,
    ) -> int:
        task_run_id = self._db.new_id(db)
        db.execute(
            "INSERT INTO tasks (task_run_id, run_id, task_key, position, attempt_number,"
            " life_cycle_state, state_message, repair_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                task_run_id,
                run_id,
                task_key,
                position,
                attempt,
                life_cycle_state,
                message,
                repair_id,
            ),
        )
        return task_run_id

    def add_attempt(
        self,
        run_id: int,
        task_key: str,
        position: int,
        attempt: int,
        message: str,
        *,
        repair_id: int = 0,
    ) -> int:
        """A retry of a task, waiting for its turn; its task run id."""
        with self._db.transaction() as db:
            return self._insert_task(
                db, run_id, task_key, position, attempt, "WAITING_FOR_RETRY", message, repair_id
            )

    # --- repairs (Jobs runs/repair: new task runs in the same run) ---------------------

    def create_repair(
        self, run_id: int, positions: dict[str, int], latest_repair_id: int | None
    ) -> int | None:
        """A repair of the ended run that re-runs the tasks ``positions`` names: new task
        runs and the run active again, at once. None when ``latest_repair_id`` is not the
        run's latest repair (a repair made meanwhile) or the run is active again."""
        with self._db.transaction() as db:
            run = db.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
            latest = db.execute(
                "SELECT MAX(repair_id) AS id FROM repairs WHERE run_id = ? AND kind = 'REPAIR'",
                (run_id,),
            ).fetchone()["id"]
            if run is None or run["active"] or latest != latest_repair_id:
                return None
            if latest is None:  # the first repair: keep how the original run ended
                db.execute(
                    "INSERT INTO repairs (repair_id, run_id, kind, start_time, end_time,"
                    " life_cycle_state, result_state, state_message)"
                    " VALUES (?, ?, 'ORIGINAL', ?, ?, ?, ?, ?)",
                    (
                        self._db.new_id(db),
                        run_id,
                        run["start_time"],
                        run["end_time"],
                        run["life_cycle_state"],
                        run["result_state"],
                        run["state_message"],
                    ),
                )
            repair_id = self._db.new_id(db)
            db.execute(
                "INSERT INTO repairs (repair_id, run_id, kind, start_time, life_cycle_state)"
                " VALUES (?, ?, 'REPAIR', ?, 'PENDING')",
                (repair_id, run_id, now_ms()),
            )
            for key, position in positions.items():
                self._insert_task(db, run_id, key, position, 0, "PENDING", "", repair_id)
            db.execute(
                "UPDATE runs SET active = 1, life_cycle_state = 'PENDING', result_state = NULL,"
                " state_message = ?, end_time = 0, cancel_requested = 0 WHERE run_id = ?",
                (f"Repair {repair_id}: waiting for the local workspace.", run_id),
            )
            return repair_id

    def repairs(self, run_id: int) -> list[Repair]:
        rows = self._db.query(
            "SELECT * FROM repairs WHERE run_id = ? ORDER BY repair_id", (run_id,)
        )
        return [Repair.from_row(r) for r in rows]

    def latest_repair_id(self, run_id: int) -> int | None:
        repairs = [r for r in self.repairs(run_id) if r.kind == "REPAIR"]
        return repairs[-1].repair_id if repairs else None

    # --- reading ----------------------------------------------------------------------

    def get(self, run_id: int) -> Run | None:
        rows = self._db.query("SELECT * FROM runs WHERE run_id = ?", (run_id,))
        return Run.from_row(rows[0]) if rows else None

    def tasks(self, run_id: int) -> list[TaskRun]:
        """Every task run of the run: by task, then repair, then attempt."""
        rows = self._db.query(
            "SELECT * FROM tasks WHERE run_id = ? ORDER BY position, repair_id, attempt_number",
            (run_id,),
        )
        return [TaskRun.from_row(r) for r in rows]

    def task(self, task_run_id: int) -> TaskRun | None:
        rows = self._db.query("SELECT * FROM tasks WHERE task_run_id = ?", (task_run_id,))
        return TaskRun.from_row(rows[0]) if rows else None

    def task_of_mlflow_run(self, mlflow_run_id: str) -> TaskRun | None:
        """The task run whose published output names that MLflow run."""
        # The output is JSON text: a LIKE narrows the rows, the decoded ids decide.
        rows = self._db.query(
            "SELECT * FROM tasks WHERE output LIKE ?", (f'%"mlflow_run_id": "{mlflow_run_id}"%',)
        )
        tasks = (TaskRun.from_row(r) for r in rows)
        return next((t for t in tasks if t.mlflow_ids.get("mlflow_run_id") == mlflow_run_id), None)

    def newest(
        self,
        *,
        active_only: bool = False,
        completed_only: bool = False,
        before_run_id: int | None = None,
        start_time_from: int | None = None,
        start_time_to: int | None = None,
        limit: int,
    ) -> tuple[list[Run], bool]:
        """Runs newest first (below `before_run_id` when given), at most `limit` of them, and
        whether more are left."""
        clauses: list[str] = []
        values: list[Any] = []
        if active_only:
            clauses.append("active = 1")
        elif completed_only:
            clauses.append("active = 0")
        if before_run_id is not None:
            clauses.append("run_id < ?")
            values.append(before_run_id)
        if start_time_from is not None:
            clauses.append("start_time >= ?")
            values.append(start_time_from)
        if start_time_to is not None:
            clauses.append("start_time <= ?")
            values.append(start_time_to)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self._db.query(
            f"SELECT * FROM runs {where} ORDER BY run_id DESC LIMIT ?", (*values, limit + 1)
        )
        return [Run.from_row(r) for r in rows[:limit]], len(rows) > limit

    def active_ids(self) -> list[int]:
        return [
            int(r["run_id"]) for r in self._db.query("SELECT run_id FROM runs WHERE active = 1")
        ]

    # --- writing ----------------------------------------------------------------------

    def update_run(self, run_id: int, **fields: Any) -> None:
        self._db.update("runs", "run_id", run_id, fields)

    def update_pending_run(self, run_id: int, **fields: Any) -> None:
        """Set ``fields`` only while the run is still PENDING (its first task starting)."""
        columns = ", ".join(f"{name} = ?" for name in fields)
        self._db.execute(
            f"UPDATE runs SET {columns} WHERE run_id = ? AND life_cycle_state = 'PENDING'",
            (*fields.values(), run_id),
        )

    def update_task(self, task_run_id: int, **fields: Any) -> None:
        self._db.update("tasks", "task_run_id", task_run_id, fields)

    def update_repair(self, repair_id: int, **fields: Any) -> None:
        self._db.update("repairs", "repair_id", repair_id, fields)
