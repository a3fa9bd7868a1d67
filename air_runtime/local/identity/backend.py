"""The workspace's credentials: its own tokens (given when it starts, or added by an admin),
the revoked ones, and the access tokens it issues (OAuth client credentials, each rank's
MLflow token). Every comparison is constant-time (`token_matches`)."""

from __future__ import annotations

import time

from air_runtime.local._security import token_matches
from air_runtime.local._store import AccessToken, TokenTables


class Tokens:
    def __init__(self, table: TokenTables, workspace_tokens: list[str], user_name: str) -> None:
        self._table = table
        self._user_name = user_name
        # Kept in memory (checked on every request); the revoked ones also in the store, so
        # a revocation outlives a restart.
        self.workspace = set(workspace_tokens)
        self.revoked = table.revoked()

    def is_revoked(self, token: str | None) -> bool:
        return token_matches(token, self.revoked)

    def is_workspace_token(self, token: str | None) -> bool:
        """One of the workspace's own tokens (revoked or not)."""
        return token_matches(token, self.workspace)

    def valid_workspace_tokens(self) -> list[str]:
        return [t for t in self.workspace if not token_matches(t, self.revoked)]

    def issued(self, token: str) -> AccessToken | None:
        """The access token this workspace issued, expired or not."""
        return self._table.access_token(token)

    def principal_of(self, token: str) -> str | None:
        """Who a valid token is (None: unknown, revoked or expired)."""
        if self.is_revoked(token):
            return None
        if self.is_workspace_token(token):
            return self._user_name
        issued = self.issued(token)
        if issued is not None and issued.expires_at > time.time():
            return issued.principal
        return None

    def issue(self, token: str, principal: str, lifetime_s: float) -> None:
        self._table.add_access_token(token, principal, time.time() + lifetime_s)

    def revoke(self, token: str) -> None:
        self._table.revoke(token)
        self.revoked.add(token)

    def add(self, token: str) -> None:
        """Make ``token`` one of the workspace's own (again, if it was revoked)."""
        self.workspace.add(token)
        self.revoked.discard(token)
        self._table.unrevoke(token)
