"""Files: the workspace tree (`/api/2.0/workspace/*`, `workspace-files/import-file`) and
Unity Catalog volumes (`/api/2.0/fs/files`, `/api/2.0/fs/directories`)."""

from __future__ import annotations

import base64
import binascii
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request, Response

from air_runtime.local._errors import invalid
from air_runtime.local._request_params import (
    flag,
    get_params,
    json_body,
    required_str,
    workspace_state,
)

router = APIRouter()


@router.post("/api/2.0/workspace/mkdirs")
async def workspace_mkdirs(request: Request) -> dict[str, Any]:
    body = await json_body(request)
    workspace_state(request).workspace.mkdirs(required_str(body, "path"))
    return {}


@router.post("/api/2.0/workspace-files/import-file/{path:path}")
async def workspace_import_file(request: Request, path: str) -> dict[str, Any]:
    content = await request.body()
    overwrite = flag(request.query_params.get("overwrite"))
    workspace_state(request).workspace.import_file("/" + path, content, overwrite)
    return {}


@router.post("/api/2.0/workspace/import")
async def workspace_import(request: Request) -> dict[str, Any]:
    body = await json_body(request)
    path = required_str(body, "path")
    try:
        content = base64.b64decode(body.get("content") or "")
    except binascii.Error:
        raise invalid("content must be base64.") from None
    workspace_state(request).workspace.import_file(path, content, bool(body.get("overwrite")))
    return {}


@router.get("/api/2.0/workspace/get-status")
async def workspace_get_status(request: Request) -> dict[str, Any]:
    path = (await get_params(request)).get("path") or ""
    return workspace_state(request).workspace.status(path)


@router.get("/api/2.0/workspace/export", response_model=None)
async def workspace_export(request: Request) -> Response | dict[str, Any]:
    params = await get_params(request)
    path = params.get("path") or ""
    content = workspace_state(request).workspace.read(path)
    if flag(params.get("direct_download")):
        return Response(content, media_type="application/octet-stream")
    return {
        "content": base64.b64encode(content).decode(),
        "file_type": Path(path).suffix.lstrip("."),
    }


@router.get("/api/2.0/workspace/list")
async def workspace_list(request: Request) -> dict[str, Any]:
    path = (await get_params(request)).get("path") or ""
    return {"objects": workspace_state(request).workspace.list(path)}


@router.post("/api/2.0/workspace/delete")
async def workspace_delete(request: Request) -> dict[str, Any]:
    body = await json_body(request)
    workspace_state(request).workspace.delete(
        required_str(body, "path"), bool(body.get("recursive"))
    )
    return {}


@router.put("/api/2.0/fs/files/{path:path}")
async def files_put(request: Request, path: str) -> Response:
    content = await request.body()
    overwrite = flag(request.query_params.get("overwrite"))
    workspace_state(request).volumes.put("/" + path, content, overwrite)
    return Response(status_code=204)


@router.get("/api/2.0/fs/files/{path:path}")
async def files_get(request: Request, path: str) -> Response:
    content = workspace_state(request).volumes.read("/" + path)
    return Response(content, media_type="application/octet-stream")


@router.put("/api/2.0/fs/directories/{path:path}")
async def directories_put(request: Request, path: str) -> Response:
    workspace_state(request).volumes.mkdirs("/" + path)
    return Response(status_code=204)


@router.get("/api/2.0/fs/directories/{path:path}")
async def directories_list(request: Request, path: str) -> dict[str, Any]:
    """A volume folder's entries (Files API `contents`: path, name, is_directory,
    file_size), as a client lists a volume artifact root (logmlflow.go listArtifacts)."""
    return {"contents": workspace_state(request).volumes.list("/" + path)}
