"""Secret scopes and their secrets: the rules of the secrets API (the store keeps them).

Names follow the platform's rules, the same ones the client derives its names with
(`air_runtime.platform`): letters, digits, '_', '-', '.' (and '@' in a scope name), at
most 128 characters. Values are bytes; nothing here ever logs or echoes one.
"""

from __future__ import annotations

import re

from air_runtime.local._errors import ApiError, invalid, not_found
from air_runtime.local._store import SecretTables
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
    """The secrets behind the secrets API, the image registry's registry credentials and
    the ranks' secret environment variables."""

    def __init__(self, table: SecretTables) -> None:
        self._table = table

    def scope_names(self) -> list[str]:
        return self._table.scope_names()

    def require_scope(self, scope: str) -> None:
        if not self._table.scope_exists(scope):
            raise not_found(f"Scope {scope} does not exist!")

    def create_scope(self, scope: str) -> None:
        if not _SCOPE_RE.match(scope):
            raise invalid(
                f"Scope name {scope!r} is invalid: use letters, digits, '_', '-', '.', '@' "
                f"(at most {MAX_KEY_LENGTH} characters)."
            )
        if not self._table.create_scope(scope):
            raise ApiError(400, "RESOURCE_ALREADY_EXISTS", f"Scope {scope} already exists!")

    def delete_scope(self, scope: str) -> None:
        """Delete the scope and every secret in it."""
        self.require_scope(scope)
        self._table.delete_scope(scope)

    def put(self, scope: str, key: str, value: bytes) -> None:
        """Create or replace a secret of an existing scope."""
        check_key_name(key)
        self.require_scope(scope)
        self._table.put(scope, key, value)

    def keys(self, scope: str) -> list[tuple[str, int]]:
        """(key, last update in ms) of every secret of an existing scope, by key."""
        self.require_scope(scope)
        return self._table.keys(scope)

    def delete(self, scope: str, key: str) -> None:
        self.require_scope(scope)
        if not self._table.delete(scope, key):
            raise not_found(f"Secret {key} does not exist in scope {scope}.")

    def value(self, scope: str, key: str) -> bytes | None:
        return self._table.value(scope, key)
