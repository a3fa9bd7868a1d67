"""Secrets: scopes and secrets (`/api/2.0/secrets/*`), kept by the `SecretStore`."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from fastapi import APIRouter, Request

from air_runtime.local._errors import invalid
from air_runtime.local._request_params import get_params, json_body, required_str, workspace_state
from air_runtime.local.secrets.backend import check_key_name

router = APIRouter()


@router.get("/api/2.0/secrets/scopes/list")
async def secret_scopes_list(request: Request) -> dict[str, Any]:
    names = workspace_state(request).secrets.scope_names()
    return {"scopes": [{"name": name, "backend_type": "DATABRICKS"} for name in names]}


@router.post("/api/2.0/secrets/scopes/create")
async def secret_scopes_create(request: Request) -> dict[str, Any]:
    scope = required_str(await json_body(request), "scope")
    workspace_state(request).secrets.create_scope(scope)
    return {}


@router.post("/api/2.0/secrets/scopes/delete")
async def secret_scopes_delete(request: Request) -> dict[str, Any]:
    scope = required_str(await json_body(request), "scope")
    workspace_state(request).secrets.delete_scope(scope)
    return {}


@router.post("/api/2.0/secrets/put")
async def secrets_put(request: Request) -> dict[str, Any]:
    body = await json_body(request)
    scope, key = required_str(body, "scope"), required_str(body, "key")
    check_key_name(key)  # a bad name is reported before a bad value
    if "string_value" in body:
        value = str(body["string_value"]).encode()
    elif "bytes_value" in body:
        try:
            value = base64.b64decode(str(body["bytes_value"]))
        except binascii.Error:
            raise invalid("bytes_value must be base64.") from None
    else:
        raise invalid("string_value or bytes_value is required.")
    workspace_state(request).secrets.put(scope, key, value)
    return {}


@router.get("/api/2.0/secrets/list")
async def secrets_list(request: Request) -> dict[str, Any]:
    scope = (await get_params(request)).get("scope") or ""
    keys = workspace_state(request).secrets.keys(scope)
    return {"secrets": [{"key": k, "last_updated_timestamp": updated} for k, updated in keys]}


@router.post("/api/2.0/secrets/delete")
async def secrets_delete(request: Request) -> dict[str, Any]:
    body = await json_body(request)
    scope, key = required_str(body, "scope"), required_str(body, "key")
    workspace_state(request).secrets.delete(scope, key)
    return {}
