"""Who is calling: the bearer token of a request against the workspace's tokens, the revoked
ones and the OAuth access tokens it issued (`identity.routes`)."""

from __future__ import annotations

import time

from fastapi import Request

from air_runtime.local._errors import ApiError
from air_runtime.local._request_params import workspace_state


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
    tokens = state.tokens
    if tokens.is_revoked(token):
        raise ApiError(403, "PERMISSION_DENIED", "Invalid access token: it was revoked.")
    if tokens.is_workspace_token(token):
        return state.options.user_name
    issued = tokens.issued(token)
    if issued is not None:
        if issued.expires_at <= time.time():
            raise ApiError(401, "UNAUTHENTICATED", "The OAuth access token has expired.")
        return issued.principal
    raise ApiError(403, "PERMISSION_DENIED", "Invalid access token.")


def authenticate_admin(request: Request) -> None:
    """Admin calls need one of the workspace's tokens that is not revoked (OAuth access
    tokens are not enough)."""
    tokens = workspace_state(request).tokens
    token = _bearer(request)
    if not tokens.is_workspace_token(token) or tokens.is_revoked(token):
        raise ApiError(403, "PERMISSION_DENIED", "Admin calls need a valid workspace token.")
