"""The MLflow calls of a task attempt's MLflow run.

Training code logs to it (`runs/log-metric`, `runs/log-batch`, `runs/log-parameter`,
`runs/set-tag`, `runs/update`: the MLflow tracking REST API,
https://mlflow.org/docs/latest/rest-api.html and https://docs.databricks.com/api/workspace/experiments),
and a client reads it back: `runs/get` (params, newest metrics, tags) and
`metrics/get-history` (what the CLI's progress estimate reads, eta.go).

A client reads a run's logs through it when the log service has nothing (logmlflow.go):
the run's artifact root (`mlflow/runs/get`), the artifact listing
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
from air_runtime.local._mlflow_runs import MlflowRuns, mlflow_runs
from air_runtime.local._request_params import get_params, host_url, int_param, json_body
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


def _run_info(state: WorkspaceState, run_id: str, task: Any) -> dict[str, Any]:
    ids = json.loads(task["output"]).get("ai_runtime_task_output") or {}
    logged = mlflow_runs(state.store).status(run_id)
    ended = bool(task["end_time"])
    status = "FINISHED" if ended else "RUNNING"
    if ended and task["result_state"] in ("CANCELED", "TIMEDOUT"):
        status = "KILLED"
    elif ended and task["result_state"] != "SUCCESS":
        status = "FAILED"
    if logged is not None and not ended:
        status = logged["status"]
    end_time = (logged["end_time"] if logged is not None else None) or task["end_time"] or None
    return {
        "run_id": run_id,
        "run_uuid": run_id,
        "run_name": (logged["run_name"] if logged is not None else None) or task["task_key"],
        "experiment_id": ids.get("mlflow_experiment_id"),
        "status": status,
        "start_time": task["start_time"],
        "end_time": end_time,
        "artifact_uri": _artifact_uri(state, task),
        "lifecycle_stage": "active",
    }


def _run_id_of(body: dict[str, Any]) -> str:
    """`run_id`, or the older `run_uuid` MLflow still accepts."""
    return str(body.get("run_id") or body.get("run_uuid") or "")


@router.get("/api/2.0/mlflow/runs/get")
async def mlflow_run(request: Request) -> dict[str, Any]:
    state = workspace_state(request)
    params = await get_params(request)
    run_id = params.get("run_id") or params.get("run_uuid") or ""
    task = _task_of(state, run_id)
    runs = mlflow_runs(state.store)
    return {
        "run": {
            "info": _run_info(state, run_id, task),
            "data": {
                "metrics": [m.to_json() for m in runs.latest_metrics(run_id)],
                "params": runs.params(run_id),
                "tags": runs.tags(run_id),
            },
        }
    }


async def _logging_to(request: Request) -> tuple[MlflowRuns, str, dict[str, Any]]:
    """The store, the run and the body of a logging request, once the run is known to be a
    task's."""
    state = workspace_state(request)
    body = await json_body(request)
    run_id = _run_id_of(body)
    _task_of(state, run_id)
    return mlflow_runs(state.store), run_id, body


@router.post("/api/2.0/mlflow/runs/log-metric")
async def log_metric(request: Request) -> dict[str, Any]:
    runs, run_id, body = await _logging_to(request)
    runs.log_batch(run_id, metrics=[body])
    return {}


@router.post("/api/2.0/mlflow/runs/log-parameter")
async def log_parameter(request: Request) -> dict[str, Any]:
    runs, run_id, body = await _logging_to(request)
    runs.log_batch(run_id, params=[body])
    return {}


@router.post("/api/2.0/mlflow/runs/set-tag")
async def set_tag(request: Request) -> dict[str, Any]:
    runs, run_id, body = await _logging_to(request)
    runs.log_batch(run_id, tags=[body])
    return {}


@router.post("/api/2.0/mlflow/runs/log-batch")
async def log_batch(request: Request) -> dict[str, Any]:
    runs, run_id, body = await _logging_to(request)
    runs.log_batch(
        run_id,
        metrics=body.get("metrics") or [],
        params=body.get("params") or [],
        tags=body.get("tags") or [],
    )
    return {}


@router.post("/api/2.0/mlflow/runs/update")
async def update_run(request: Request) -> dict[str, Any]:
    state = workspace_state(request)
    body = await json_body(request)
    run_id = _run_id_of(body)
    task = _task_of(state, run_id)
    end_time = body.get("end_time")
    mlflow_runs(state.store).set_status(
        run_id,
        body.get("status"),
        None if end_time is None else int_param(end_time, "end_time"),
        body.get("run_name") if isinstance(body.get("run_name"), str) else None,
    )
    return {"run_info": _run_info(state, run_id, task)}


# metrics/get-history pages: MLflow's default and largest page.
_HISTORY_PAGE = 25_000


@router.get("/api/2.0/mlflow/metrics/get-history")
async def metric_history(request: Request) -> dict[str, Any]:
    state = workspace_state(request)
    params = await get_params(request)
    run_id = params.get("run_id") or params.get("run_uuid") or ""
    _task_of(state, run_id)
    key = params.get("metric_key") or ""
    if not key:
        raise invalid("metric_key is required.")
    limit = _HISTORY_PAGE
    if params.get("max_results"):
        limit = max(1, min(int_param(params["max_results"], "max_results"), _HISTORY_PAGE))
    after = 0
    if params.get("page_token"):
        after = int_param(params["page_token"], "page_token")
    points, next_seq = mlflow_runs(state.store).history(run_id, key, after, limit)
    answer: dict[str, Any] = {"metrics": [p.to_json() for p in points]}
    if next_seq:
        answer["next_page_token"] = str(next_seq)
    return answer


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
