"""Secret scopes and their secrets, kept in the workspace's SQLite state.

Names follow the platform's rules, the same ones the client derives its names with
(`air_runtime.platform`): letters, digits, '_', '-', '.' (and '@' in a scope name), at
most 128 characters. Values are bytes; nothing here ever logs or echoes one.
"""

from __future__ import annotations

import re

from air_runtime.local._errors import ApiError, invalid, not_found
from air_runtime.local._store import Store, now_ms
from air_runtime.platform import MAX_SECRET_NAME_LENGTH as MAX_KEY_LENGTH
from air_runtime.platform import SECRET_KEY_CHARACTERS, SECRET_SCOPE_CHARACTERS

_SCOPE_RE = re.compile(rf"^[{SECRET_SCOPE_CHARACTERS}]{{1,{MAX_KEY_LENGTH}}}$")
_KEY_RE = re.compile(rf"^[{SECRET_KEY_CHARACTERS}]{{1,{MAX_KEY_LENGTH}}}$")


def check_key_name(key: str) -> None:
    if not _KEY_RE.match(key):
        raise invalid(
            f"Secret key {key!r} is invalid: use letters, digits, '_', '-', '.' "
            f"(at most {MAX_KEY_LENGTH} characters)."
        )


class SecretStore:
    """The `scopes` and `secrets` tables behind the secrets API, the image registry's
    registry credentials and the ranks' secret environment variables."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def scope_names(self) -> list[str]:
        return [str(r["name"]) for r in self._store.query("SELECT name FROM scopes ORDER BY name")]

    def require_scope(self, scope: str) -> None:
        if not self._store.query("SELECT 1 FROM scopes WHERE name = ?", (scope,)):
            raise not_found(f"Scope {scope} does not exist!")

    def create_scope(self, scope: str) -> None:
        if not _SCOPE_RE.match(scope):
            raise invalid(
                f"Scope name {scope!r} is invalid: use letters, digits, '_', '-', '.', '@' "
                f"(at most {MAX_KEY_LENGTH} characters)."
            )
        with self._store.transaction() as db:
            if db.execute("SELECT 1 FROM scopes WHERE name = ?", (scope,)).fetchone():
                raise ApiError(400, "RESOURCE_ALREADY_EXISTS", f"Scope {scope} already exists!")
            db.execute("INSERT INTO scopes (name, created) VALUES (?, ?)", (scope, now_ms()))

    def delete_scope(self, scope: str) -> None:
        """Delete the scope and every secret in it."""
        self.require_scope(scope)
        with self._store.transaction() as db:
            db.execute("DELETE FROM secrets WHERE scope = ?", (scope,))
            db.execute("DELETE FROM scopes WHERE name = ?", (scope,))

    def put(self, scope: str, key: str, value: bytes) -> None:
        """Create or replace a secret of an existing scope."""
        check_key_name(key)
        self.require_scope(scope)
        self._store.execute(
            "INSERT OR REPLACE INTO secrets (scope, key, value, updated) VALUES (?, ?, ?, ?)",
            (scope, key, value, now_ms()),
        )

    def keys(self, scope: str) -> list[tuple[str, int]]:
        """(key, last update in ms) of every secret of an existing scope, by key."""
        self.require_scope(scope)
        rows = self._store.query(
            "SELECT key, updated FROM secrets WHERE scope = ? ORDER BY key", (scope,)
        )
        return [(str(r["key"]), int(r["updated"])) for r in rows]

    def delete(self, scope: str, key: str) -> None:
        self.require_scope(scope)
        if not self._store.execute("DELETE FROM secrets WHERE scope = ? AND key = ?", (scope, key)):
            raise not_found(f"Secret {key} does not exist in scope {scope}.")

    def value(self, scope: str, key: str) -> bytes | None:
        rows = self._store.query(
            "SELECT value FROM secrets WHERE scope = ? AND key = ?", (scope, key)
        )
        return bytes(rows[0]["value"]) if rows else None
