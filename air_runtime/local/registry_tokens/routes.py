"""The token endpoint of the Artifact Registry stand-in (`backend`): Basic
``oauthtoken:<a token of this workspace>`` in, a registry JWT out."""

from __future__ import annotations

import base64
import binascii
import datetime
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from air_runtime.local._request_params import workspace_state
from air_runtime.local.registry_tokens.backend import (
    OAUTH_TOKEN_USERNAME,
    SERVICE,
    TOKEN_LIFETIME_S,
    TOKEN_PATH,
    issue_token,
)

public_router = APIRouter()


def _refused(message: str) -> JSONResponse:
    return JSONResponse(
        {"errors": [{"code": "UNAUTHORIZED", "message": message}]},
        status_code=401,
        headers={"WWW-Authenticate": f'Basic realm="{SERVICE}"'},
    )


@public_router.get(TOKEN_PATH)
async def registry_token(request: Request) -> JSONResponse:
    scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "basic":
        return _refused("log in with user oauthtoken and a workspace token")
    try:
        user, _, password = base64.b64decode(encoded, validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return _refused("malformed Basic credentials")
    state = workspace_state(request)
    principal = state.tokens.principal_of(password) if user == OAUTH_TOKEN_USERNAME else None
    if principal is None:
        return _refused("invalid credentials: use user oauthtoken and a workspace token")
    scopes = request.query_params.getlist("scope")
    token = issue_token(state.data_dir, principal, scopes)
    body: dict[str, Any] = {
        "token": token,
        "access_token": token,
        "expires_in": TOKEN_LIFETIME_S,
        "issued_at": datetime.datetime.now(datetime.UTC).isoformat(),
    }
    return JSONResponse(body)
