"""Who may read what: secret scopes and their secrets, the tokens this workspace issued or
revoked, and the access control lists of runs."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from air_runtime.local._store._database import Database
from air_runtime.local._store._records import AccessToken, acl_of, now_ms


class SecretTables:
    """Scopes and secrets; values are bytes and never leave through anything but `value`."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def scope_names(self) -> list[str]:
        return [str(r["name"]) for r in self._db.query("SELECT name FROM scopes ORDER BY name")]

    def scope_exists(self, scope: str) -> bool:
        return bool(self._db.query("SELECT 1 FROM scopes WHERE name = ?", (scope,)))

    def create_scope(self, scope: str) -> bool:
        """False when the scope exists already."""
        with self._db.transaction() as db:
            if db.execute("SELECT 1 FROM scopes WHERE name = ?", (scope,)).fetchone():
                return False
            db.execute("INSERT INTO scopes (name, created) VALUES (?, ?)", (scope, now_ms()))
            return True

    def delete_scope(self, scope: str) -> None:
        """Delete the scope and every secret in it."""
        with self._db.transaction() as db:
            db.execute("DELETE FROM secrets WHERE scope = ?", (scope,))
            db.execute("DELETE FROM scopes WHERE name = ?", (scope,))

    def put(self, scope: str, key: str, value: bytes) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO secrets (scope, key, value, updated) VALUES (?, ?, ?, ?)",
            (scope, key, value, now_ms()),
        )

    def keys(self, scope: str) -> list[tuple[str, int]]:
        """(key, last update in ms) of every secret of the scope, by key."""
        rows = self._db.query(
            "SELECT key, updated FROM secrets WHERE scope = ? ORDER BY key", (scope,)
        )
        return [(str(r["key"]), int(r["updated"])) for r in rows]

    def delete(self, scope: str, key: str) -> bool:
        """False when there was no such secret."""
        return bool(
            self._db.execute("DELETE FROM secrets WHERE scope = ? AND key = ?", (scope, key))
        )

    def value(self, scope: str, key: str) -> bytes | None:
        rows = self._db.query("SELECT value FROM secrets WHERE scope = ? AND key = ?", (scope, key))
        return bytes(rows[0]["value"]) if rows else None


class TokenTables:
    """Revoked tokens, and the access tokens this workspace issued."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def revoked(self) -> set[str]:
        return {str(r["token"]) for r in self._db.query("SELECT token FROM revoked_tokens")}

    def revoke(self, token: str) -> None:
        self._db.execute("INSERT OR IGNORE INTO revoked_tokens (token) VALUES (?)", (token,))

    def unrevoke(self, token: str) -> None:
        self._db.execute("DELETE FROM revoked_tokens WHERE token = ?", (token,))

    def add_access_token(self, token: str, principal: str, expires_at: float) -> None:
        self._db.execute(
            "INSERT INTO access_tokens (token, principal, expires_at) VALUES (?, ?, ?)",
            (token, principal, expires_at),
        )

    def access_token(self, token: str) -> AccessToken | None:
        rows = self._db.query("SELECT * FROM access_tokens WHERE token = ?", (token,))
        if not rows:
            return None
        return AccessToken(str(rows[0]["token"]), str(rows[0]["principal"]), rows[0]["expires_at"])

    def remove_access_token(self, token: str) -> None:
        self._db.execute("DELETE FROM access_tokens WHERE token = ?", (token,))


class JobAclTable:
    """The access control list of each run (a one-time run is its own job)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def get(self, job_id: int) -> list[dict[str, Any]]:
        rows = self._db.query("SELECT acl FROM permissions WHERE job_id = ?", (job_id,))
        return acl_of(rows[0] if rows else None)

    def update(
        self, job_id: int, change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
    ) -> list[dict[str, Any]]:
        """Replace the run's list with ``change`` of it, in one transaction."""
        with self._db.transaction() as db:
            row = db.execute("SELECT acl FROM permissions WHERE job_id = ?", (job_id,)).fetchone()
            acl = change(acl_of(row))
            db.execute(
                "INSERT OR REPLACE INTO permissions (job_id, acl) VALUES (?, ?)",
                (job_id, json.dumps(acl)),
            )
        return acl
