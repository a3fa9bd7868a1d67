"""The MLflow calls a client reads a run's logs through when the log service has nothing
(logmlflow.go): the run's artifact root (`mlflow/runs/get`), the artifact listing
(`mlflow/artifacts/list`), and a pre-signed URL for one file
(`mlflow/artifacts/credentials-for-read`) fetched without the workspace's token.

Every task attempt here has its own MLflow run (the ids in its runs/get-output), so its
logs are served in the layout without attempt folders: `logs/node_<n>/logs-<i>.chunk.txt`,
each node's output in chunks of at most 4 MiB cut at line ends, as the platform's sidecar
writes them. A signed URL names the run, the path and an expiry, signed with a key of
this server process (it stops working when the workspace restarts)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import re
import secrets
import time
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import Response

from air_runtime.local._errors import ApiError, invalid, not_found
from air_runtime.local._request_params import get_params, host_url
from air_runtime.local._workspace_state import WorkspaceState, workspace_state

router = APIRouter()
public_router = APIRouter()

CHUNK_BYTES = 4 * 1024 * 1024
SIGNED_PATH = "/airo-artifacts/download"
_SIGNED_URL_LIFETIME_S = 900
_NODE_DIR_RE = re.compile(r"^logs/node_(\d+)$")
_CHUNK_RE = re.compile(r"^logs/node_(\d+)/logs-(\d+)\.chunk\.txt$")
_SIGNING_KEY = secrets.token_bytes(32)


def _task_of(state: WorkspaceState, mlflow_run_id: str) -> Any:
    if not re.fullmatch(r"[0-9a-f]{32}", mlflow_run_id or ""):
        raise not_found(f"Run '{mlflow_run_id}' not found.")
    rows = state.store.query(
        "SELECT * FROM tasks WHERE output LIKE ?", (f'%"mlflow_run_id": "{mlflow_run_id}"%',)
    )
    if not rows:
        raise not_found(f"Run '{mlflow_run_id}' not found.")
    return rows[0]


def _artifact_uri(task: Any) -> str:
    ids = json.loads(task["output"]).get("ai_runtime_task_output") or {}
    return (
        f"dbfs:/databricks/mlflow-tracking/{ids.get('mlflow_experiment_id')}/"
        f"{ids.get('mlflow_run_id')}/artifacts"
    )


def _node_lines(state: WorkspaceState, task_run_id: int, node: int) -> list[str]:
    lines: list[str] = []
    token: str | None = None
    while True:
        page, token = state.logbook.page([task_run_id], node, size=10_000, token=token)
        lines += [str(r["body"]) for r in page]
        if not token:
            return lines


def _chunks(lines: list[str]) -> list[bytes]:
    chunks: list[bytes] = []
    current = bytearray()
    for line in lines:
        data = (line.rstrip("\n") + "\n").encode()
        if current and len(current) + len(data) > CHUNK_BYTES:
            chunks.append(bytes(current))
            current = bytearray()
        current += data
    if current:
        chunks.append(bytes(current))
    return chunks


def _nodes(state: WorkspaceState, task_run_id: int) -> list[int]:
    """The nodes that wrote output (the log book keeps one file per node)."""
    folder = state.logbook.path(task_run_id, 0).parent
    found = {
        int(match.group(1))
        for path in (folder.glob("node-*.jsonl") if folder.is_dir() else [])
        if (match := re.fullmatch(r"node-(\d+)\.jsonl", path.name))
    }
    return sorted(found) or [0]


@router.get("/api/2.0/mlflow/runs/get")
async def mlflow_run(request: Request) -> dict[str, Any]:
    state = workspace_state(request)
    run_id = (await get_params(request)).get("run_id") or ""
    task = _task_of(state, run_id)
    ids = json.loads(task["output"]).get("ai_runtime_task_output") or {}
    ended = bool(task["end_time"])
    return {
        "run": {
            "info": {
                "run_id": run_id,
                "run_uuid": run_id,
                "experiment_id": ids.get("mlflow_experiment_id"),
                "status": "FINISHED" if ended else "RUNNING",
                "start_time": task["start_time"],
                "end_time": task["end_time"] or None,
                "artifact_uri": _artifact_uri(task),
                "lifecycle_stage": "active",
            },
            "data": {},
        }
    }


async def _listing(state: WorkspaceState, task: Any, path: str) -> list[dict[str, Any]]:
    task_run_id = int(task["task_run_id"])
    path = path.strip("/")
    if path in ("", "logs"):
        nodes = await asyncio.to_thread(_nodes, state, task_run_id)
        entries = [{"path": f"logs/node_{n}", "is_dir": True} for n in nodes]
        return entries if path == "logs" else [{"path": "logs", "is_dir": True}]
    match = _NODE_DIR_RE.match(path)
    if match is None:
        return []
    lines = await asyncio.to_thread(_node_lines, state, task_run_id, int(match.group(1)))
    return [
        {"path": f"{path}/logs-{i}.chunk.txt", "is_dir": False, "file_size": len(chunk)}
        for i, chunk in enumerate(_chunks(lines))
    ]


@router.get("/api/2.0/mlflow/artifacts/list")
async def list_artifacts(request: Request) -> dict[str, Any]:
    state = workspace_state(request)
    params = await get_params(request)
    task = _task_of(state, params.get("run_id") or "")
    files = await _listing(state, task, params.get("path") or "")
    return {"root_uri": _artifact_uri(task), "files": files}


def _signature(run_id: str, path: str, expires: int) -> str:
    message = f"{run_id}\0{path}\0{expires}".encode()
    return hmac.new(_SIGNING_KEY, message, hashlib.sha256).hexdigest()


@router.get("/api/2.0/mlflow/artifacts/credentials-for-read")
async def credentials_for_read(request: Request) -> dict[str, Any]:
    state = workspace_state(request)
    params = await get_params(request)
    run_id, path = params.get("run_id") or "", (params.get("path") or "").strip("/")
    _task_of(state, run_id)
    if not _CHUNK_RE.match(path):
        raise invalid(f"path {path[:200]!r} is not a file of this run's artifacts.")
    expires = int(time.time()) + _SIGNED_URL_LIFETIME_S
    query = urlencode(
        {
            "run_id": run_id,
            "path": path,
            "expires": expires,
            "sig": _signature(run_id, path, expires),
        }
    )
    return {
        "credential_infos": [
            {
                "run_id": run_id,
                "path": path,
                "signed_uri": f"{host_url(request)}{SIGNED_PATH}?{query}",
                "type": "AWS_PRESIGNED_URL",
                "headers": [],
            }
        ]
    }


@public_router.get(SIGNED_PATH)
async def download(request: Request) -> Response:
    """A pre-signed artifact URL: the signature is the credential, as on cloud storage."""
    state = workspace_state(request)
    params = request.query_params
    run_id, path = params.get("run_id") or "", params.get("path") or ""
    try:
        expires = int(params.get("expires") or "0")
    except ValueError:
        expires = 0
    signature = params.get("sig") or ""
    if expires < time.time() or not hmac.compare_digest(
        signature, _signature(run_id, path, expires)
    ):
        raise ApiError(403, "PERMISSION_DENIED", "The signature is invalid or expired.")
    task = _task_of(state, run_id)
    match = _CHUNK_RE.match(path)
    if match is None:
        raise not_found("No such artifact.")
    node, index = int(match.group(1)), int(match.group(2))
    lines = await asyncio.to_thread(_node_lines, state, int(task["task_run_id"]), node)
    chunks = _chunks(lines)
    if index >= len(chunks):
        raise not_found("No such artifact.")
    return Response(chunks[index], media_type="text/plain; charset=utf-8")
