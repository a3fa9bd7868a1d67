"""The SQLite database under the store: one connection, guarded by a lock, in WAL mode so a
crash or restart loses nothing that was acknowledged; the schema of every table, and the
id sequence runs and task runs share."""

from __future__ import annotations

import json
import secrets
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from air_runtime.local._security import touch_private

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

_FIRST_ID = 1000  # run ids look like platform ids, not 1, 2, 3


class Database:
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

    def update(self, table: str, key: str, ident: Any, fields: dict[str, Any]) -> int:
        """Set ``fields`` (column names of this module's schema, never a caller's text) of
        one row; a dict or list is stored as its JSON."""
        if not fields:
            return 0
        columns = ", ".join(f"{name} = ?" for name in fields)
        values = tuple(json.dumps(v) if isinstance(v, dict | list) else v for v in fields.values())
        return self.execute(f"UPDATE {table} SET {columns} WHERE {key} = ?", (*values, ident))
