"""SQLite state of a local workspace: runs, task attempts, secrets, images, tokens.

Workspace and volume files live as plain files under the data dir (see `_files.py`); only
the state that needs queries or atomic updates is here. One connection, guarded by a lock,
in WAL mode so a crash or restart loses nothing that was acknowledged.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from air_runtime.local._security import touch_private

ACTIVE_LIFE_CYCLES = ("QUEUED", "PENDING", "RUNNING", "TERMINATING", "BLOCKED", "WAITING_FOR_RETRY")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS ids (id INTEGER PRIMARY KEY AUTOINCREMENT);
CREATE TABLE IF NOT EXISTS runs (
    run_id INTEGER PRIMARY KEY,
    idempotency_token TEXT UNIQUE,
    run_name TEXT NOT NULL,
    body TEXT NOT NULL,
    life_cycle_state TEXT NOT NULL,
    result_state TEXT,
    state_message TEXT NOT NULL DEFAULT '',
    start_time INTEGER NOT NULL,
    end_time INTEGER NOT NULL DEFAULT 0,
    active INTEGER NOT NULL DEFAULT 1,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    mode TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_active ON runs (active, run_id);
CREATE TABLE IF NOT EXISTS tasks (
    task_run_id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL,
    task_key TEXT NOT NULL,
    position INTEGER NOT NULL,
    attempt_number INTEGER NOT NULL,
    life_cycle_state TEXT NOT NULL,
    result_state TEXT,
    state_message TEXT NOT NULL DEFAULT '',
    start_time INTEGER NOT NULL DEFAULT 0,
    end_time INTEGER NOT NULL DEFAULT 0,
    output TEXT NOT NULL DEFAULT '{}',
    pgids TEXT NOT NULL DEFAULT '[]',
    repair_id INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS tasks_run ON tasks (run_id, position, attempt_number);
CREATE TABLE IF NOT EXISTS repairs (
    repair_id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL,
    kind TEXT NOT NULL,
    start_time INTEGER NOT NULL,
    end_time INTEGER NOT NULL DEFAULT 0,
    life_cycle_state TEXT NOT NULL,
    result_state TEXT,
    state_message TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS repairs_run ON repairs (run_id, repair_id);
CREATE TABLE IF NOT EXISTS scopes (name TEXT PRIMARY KEY, created INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS secrets (
    scope TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL, updated INTEGER NOT NULL,
    PRIMARY KEY (scope, key)
);
CREATE TABLE IF NOT EXISTS images (
    url TEXT PRIMARY KEY,
    registered_at REAL NOT NULL,
    generation INTEGER NOT NULL,
    credentials_scope TEXT,
    credentials_key TEXT,
    outcome_state TEXT NOT NULL,
    outcome_message TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS access_tokens (
    token TEXT PRIMARY KEY, principal TEXT NOT NULL, expires_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS revoked_tokens (token TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS permissions (job_id INTEGER PRIMARY KEY, acl TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS usage_policies (
    policy_id TEXT PRIMARY KEY, policy_name TEXT NOT NULL, created INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS experiments (
    experiment_id TEXT PRIMARY KEY, path TEXT NOT NULL, acl TEXT NOT NULL DEFAULT '[]'
);
"""

_FIRST_ID = 1000  # run ids look like platform ids, not 1, 2, 3


def now_ms() -> int:
    return int(time.time() * 1000)


class Store:
    def __init__(self, path: Path) -> None:
        self._lock = threading.RLock()
        # Created 0600 first: SQLite gives its -wal and -shm files the same mode.
        touch_private(path)
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        columns = {r["name"] for r in self._db.execute("PRAGMA table_info(tasks)")}
        if "repair_id" not in columns:  # a data dir from before repairs
            self._db.execute("ALTER TABLE tasks ADD COLUMN repair_id INTEGER NOT NULL DEFAULT 0")
        with self._lock:
            if self._db.execute("SELECT COUNT(*) FROM ids").fetchone()[0] == 0:
                self._db.execute("INSERT INTO ids (id) VALUES (?)", (_FIRST_ID,))

    def instance_id(self) -> str:
        """A random id of this workspace, kept across restarts: set in every rank it starts,
        so clean-up after a restart only ever touches this workspace's processes."""
        with self.transaction() as db:
            row = db.execute("SELECT value FROM meta WHERE name = 'instance_id'").fetchone()
            if row is not None:
                return str(row["value"])
            value = secrets.token_hex(16)
            db.execute("INSERT INTO meta (name, value) VALUES ('instance_id', ?)", (value,))
            return value

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> int:
        with self._lock:
            return self._db.execute(sql, params).rowcount

    def new_id(self, db: sqlite3.Connection) -> int:
        cursor = db.execute("INSERT INTO ids DEFAULT VALUES")
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    # --- runs -------------------------------------------------------------------------

    def create_run(self, body: dict[str, Any], token: str | None, mode: str) -> tuple[int, bool]:
        """Create the run and its first task attempts; an idempotency token seen before
        returns the existing run id instead (forever, also after the run ended)."""
        with self.transaction() as db:
            if token:
                row = db.execute(
                    "SELECT run_id FROM runs WHERE idempotency_token = ?", (token,)
                ).fetchone()
                if row is not None:
                    return int(row["run_id"]), False
            run_id = self.new_id(db)
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
        task_run_id = self.new_id(db)
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
        with self.transaction() as db:
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
        with self.transaction() as db:
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
                        self.new_id(db),
                        run_id,
                        run["start_time"],
                        run["end_time"],
                        run["life_cycle_state"],
                        run["result_state"],
                        run["state_message"],
                    ),
                )
            repair_id = self.new_id(db)
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

    def repair_rows(self, run_id: int) -> list[sqlite3.Row]:
        return self.query("SELECT * FROM repairs WHERE run_id = ? ORDER BY repair_id", (run_id,))

    def latest_repair_id(self, run_id: int) -> int | None:
        repairs = [r for r in self.repair_rows(run_id) if r["kind"] == "REPAIR"]
        return int(repairs[-1]["repair_id"]) if repairs else None

    def run_row(self, run_id: int) -> sqlite3.Row | None:
        rows = self.query("SELECT * FROM runs WHERE run_id = ?", (run_id,))
        return rows[0] if rows else None

    def task_rows(self, run_id: int) -> list[sqlite3.Row]:
        return self.query(
            "SELECT * FROM tasks WHERE run_id = ? ORDER BY position, repair_id, attempt_number",
            (run_id,),
        )

    def task_row(self, task_run_id: int) -> sqlite3.Row | None:
        rows = self.query("SELECT * FROM tasks WHERE task_run_id = ?", (task_run_id,))
        return rows[0] if rows else None

    def update_run(self, run_id: int, **fields: Any) -> None:
        self._update("runs", "run_id", run_id, fields)

    def update_task(self, task_run_id: int, **fields: Any) -> None:
        self._update("tasks", "task_run_id", task_run_id, fields)

    def update_repair(self, repair_id: int, **fields: Any) -> None:
        self._update("repairs", "repair_id", repair_id, fields)

    def _update(self, table: str, key: str, ident: int, fields: dict[str, Any]) -> None:
        if not fields:
            return
        columns = ", ".join(f"{name} = ?" for name in fields)
        values = tuple(json.dumps(v) if isinstance(v, dict | list) else v for v in fields.values())
        self.execute(f"UPDATE {table} SET {columns} WHERE {key} = ?", (*values, ident))

    def list_runs(
        self,
        *,
        active_only: bool,
        completed_only: bool,
        before_run_id: int | None,
        start_time_from: int | None,
        start_time_to: int | None,
        limit: int,
    ) -> tuple[list[sqlite3.Row], bool]:
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
        rows = self.query(
            f"SELECT * FROM runs {where} ORDER BY run_id DESC LIMIT ?", (*values, limit + 1)
        )
        return rows[:limit], len(rows) > limit

    def active_run_ids(self) -> list[int]:
        return [int(r["run_id"]) for r in self.query("SELECT run_id FROM runs WHERE active = 1")]

    # --- tokens -----------------------------------------------------------------------

    def revoked_tokens(self) -> set[str]:
        return {str(r["token"]) for r in self.query("SELECT token FROM revoked_tokens")}

    def revoke(self, token: str) -> None:
        self.execute("INSERT OR IGNORE INTO revoked_tokens (token) VALUES (?)", (token,))

    def unrevoke(self, token: str) -> None:
        self.execute("DELETE FROM revoked_tokens WHERE token = ?", (token,))

    def add_access_token(self, token: str, principal: str, expires_at: float) -> None:
        self.execute(
            "INSERT INTO access_tokens (token, principal, expires_at) VALUES (?, ?, ?)",
            (token, principal, expires_at),
        )

    def access_token(self, token: str) -> sqlite3.Row | None:
        rows = self.query("SELECT * FROM access_tokens WHERE token = ?", (token,))
        return rows[0] if rows else None
