"""The MLflow calls a client reads a run's logs through when the log service has nothing
(logmlflow.go): the run's artifact root (`mlflow/runs/get`), the artifact listing
(`mlflow/artifacts/list`), and a pre-signed URL for one file
(`mlflow/artifacts/credentials-for-read`) fetched without the workspace's token.

The artifacts are each node's output (`_log_artifacts`). A signed URL names the run, the path and an expiry, signed with a key of
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
from air_runtime.local._log_artifacts import artifact_uri, node_chunks, nodes
from air_runtime.local._request_params import get_params, host_url
from air_runtime.local._workspace_state import WorkspaceState, workspace_state

router = APIRouter()
public_router = APIRouter()

SIGNED_PATH = "/airo-artifacts/download"
_SIGNED_URL_LIFETIME_S = 900
_NODE_DIR_RE = re.compile(r"^logs/node_(\d+)$")
_CHUNK_RE = re.compile(r"^logs/node_(\d+)/logs-(\d+)\.chunk\.txt$")
_SIGNING_KEY = secrets.token_bytes(32)


def _spec(state: WorkspaceState, task: Any) -> dict[str, Any]:
    run = state.store.run_row(int(task["run_id"]))
    tasks = json.loads(run["body"]).get("tasks") or [] if run is not None else []
    return next((t for t in tasks if t.get("task_key") == task["task_key"]), {})


def _artifact_uri(state: WorkspaceState, task: Any) -> str:
    return artifact_uri(_spec(state, task), task["output"])


def _task_of(state: WorkspaceState, mlflow_run_id: str) -> Any:
    if not re.fullmatch(r"[0-9a-f]{32}", mlflow_run_id or ""):
        raise not_found(f"Run '{mlflow_run_id}' not found.")
    rows = state.store.query(
        "SELECT * FROM tasks WHERE output LIKE ?", (f'%"mlflow_run_id": "{mlflow_run_id}"%',)
    )
    if not rows:
        raise not_found(f"Run '{mlflow_run_id}' not found.")
    return rows[0]


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
                "artifact_uri": _artifact_uri(state, task),
                "lifecycle_stage": "active",
            },
            "data": {},
        }
    }


async def _listing(state: WorkspaceState, task: Any, path: str) -> list[dict[str, Any]]:
    task_run_id = int(task["task_run_id"])
    path = path.strip("/")
    if path in ("", "logs"):
        found = await asyncio.to_thread(nodes, state.logbook, task_run_id)
        entries = [{"path": f"logs/node_{n}", "is_dir": True} for n in found]
        return entries if path == "logs" else [{"path": "logs", "is_dir": True}]
    match = _NODE_DIR_RE.match(path)
    if match is None:
        return []
    chunks = await asyncio.to_thread(node_chunks, state.logbook, task_run_id, int(match.group(1)))
    return [
        {"path": f"{path}/logs-{i}.chunk.txt", "is_dir": False, "file_size": len(chunk)}
        for i, chunk in enumerate(chunks)
    ]


@router.get("/api/2.0/mlflow/artifacts/list")
async def list_artifacts(request: Request) -> dict[str, Any]:
    state = workspace_state(request)
    params = await get_params(request)
    task = _task_of(state, params.get("run_id") or "")
    files = await _listing(state, task, params.get("path") or "")
    return {"root_uri": _artifact_uri(state, task), "files": files}


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
    chunks = await asyncio.to_thread(node_chunks, state.logbook, int(task["task_run_id"]), node)
    if index >= len(chunks):
        raise not_found("No such artifact.")
    return Response(chunks[index], media_type="text/plain; charset=utf-8")
