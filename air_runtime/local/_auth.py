"""Who is calling: the bearer token of a request against the workspace's tokens, the revoked
ones and the OAuth access tokens it issued (`_api_identity.py`)."""

from __future__ import annotations

import time

from fastapi import Request

from air_runtime.local._errors import ApiError
from air_runtime.local._security import token_matches
from air_runtime.local._workspace_state import workspace_state


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def authenticate(request: Request) -> str:
    """The principal of the request's bearer token (user name or OAuth client id)."""
    state = workspace_state(request)
    token = _bearer(request)
    if token is None:
        raise ApiError(
            401,
            "UNAUTHENTICATED",
            "Missing bearer token: send the header 'Authorization: Bearer <token>'.",
        )
    if token_matches(token, state.revoked):
        raise ApiError(403, "PERMISSION_DENIED", "Invalid access token: it was revoked.")
    if token_matches(token, state.tokens):
        return state.options.user_name
    row = state.store.access_token(token)
    if row is not None:
        if row["expires_at"] <= time.time():
            raise ApiError(401, "UNAUTHENTICATED", "The OAuth access token has expired.")
        return str(row["principal"])
    raise ApiError(403, "PERMISSION_DENIED", "Invalid access token.")


def authenticate_admin(request: Request) -> None:
    """Admin calls need one of the workspace's tokens that is not revoked (OAuth access
    tokens are not enough)."""
    state = workspace_state(request)
    token = _bearer(request)
    if not token_matches(token, state.tokens) or token_matches(token, state.revoked):
        raise ApiError(403, "PERMISSION_DENIED", "Admin calls need a valid workspace token.")
