"""Identity: the SCIM `Me` of the caller, and the OAuth machine-to-machine flow (the host
metadata databricks-sdk probes, the OIDC discovery document and the `client_credentials`
token endpoint)."""

from __future__ import annotations

import base64
import binascii
import hmac
import secrets as token_source
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from air_runtime.local._request_params import host_url, workspace_state
from air_runtime.local.identity.auth import authenticate

router = APIRouter()
public_router = APIRouter()


@router.get("/api/2.0/preview/scim/v2/Me")
async def scim_me(request: Request, principal: str = Depends(authenticate)) -> JSONResponse:
    state = workspace_state(request)
    user_id = (
        state.options.user_id
        if principal == state.options.user_name
        else str(abs(hash(principal)) % 10**15)
    )
    body = {
        "schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"],
        "id": user_id,
        "userName": principal,
        "displayName": principal.split("@")[0],
        "active": True,
        "emails": [{"value": principal, "type": "work", "primary": True}],
    }
    return JSONResponse(body, headers={"X-Databricks-Org-Id": state.options.workspace_id})


@public_router.get("/.well-known/databricks-config")
async def host_metadata(request: Request) -> dict[str, Any]:
    # databricks-sdk probes this while building its Config; without it every SDK client
    # start-up logs a warning and waits on a failed request.
    state = workspace_state(request)
    return {
        "oidc_endpoint": f"{host_url(request)}/oidc",
        "workspace_id": state.options.workspace_id,
    }


@public_router.get("/oidc/.well-known/oauth-authorization-server")
async def oidc_metadata(request: Request) -> dict[str, Any]:
    host = host_url(request)
    return {
        "issuer": f"{host}/oidc",
        "authorization_endpoint": f"{host}/oidc/v1/authorize",
        "token_endpoint": f"{host}/oidc/v1/token",
        "grant_types_supported": ["client_credentials"],
    }


@public_router.post("/oidc/v1/token")
async def oidc_token(request: Request) -> JSONResponse:
    state = workspace_state(request)
    form = dict(await request.form())
    client_id, client_secret = str(form.get("client_id", "")), str(form.get("client_secret", ""))
    scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "basic":
        try:
            client_id, _, client_secret = base64.b64decode(encoded).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            client_id = client_secret = ""
    if form.get("grant_type") != "client_credentials":
        return JSONResponse(
            {"error": "unsupported_grant_type", "error_description": "Use client_credentials."},
            status_code=400,
        )
    expected = state.options.oauth_clients.get(client_id)
    if expected is None or not hmac.compare_digest(expected.encode(), client_secret.encode()):
        return JSONResponse(
            {"error": "invalid_client", "error_description": "Client authentication failed."},
            status_code=401,
        )
    token = "airo-oauth-" + token_source.token_urlsafe(24)
    lifetime = state.options.oauth_token_lifetime_s
    state.tokens.issue(token, client_id, lifetime)
    return JSONResponse(
        {
            "access_token": token,
            "token_type": "Bearer",
            "expires_in": int(lifetime) if lifetime >= 1 else lifetime,
            "scope": str(form.get("scope") or "all-apis"),
        }
    )
