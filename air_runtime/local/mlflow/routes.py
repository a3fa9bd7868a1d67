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

The artifacts are each node's output (`log_artifacts`), kept by `MlflowRuns`. A signed URL
names the run, the path and an expiry, signed with a key of this server process (it stops
working when the workspace restarts)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import time
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import Response

from air_runtime.local._errors import ApiError, invalid
from air_runtime.local._request_params import (
    get_params,
    host_url,
    int_param,
    json_body,
    workspace_state,
)
from air_runtime.local.mlflow.backend import CHUNK_PATH_RE, MlflowRun

router = APIRouter()
public_router = APIRouter()

SIGNED_PATH = "/airo-artifacts/download"
_SIGNED_URL_LIFETIME_S = 900
_SIGNING_KEY = secrets.token_bytes(32)


def _info_json(run: MlflowRun) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "run_uuid": run.run_id,
        "run_name": run.run_name,
        "experiment_id": run.experiment_id,
        "status": run.status,
        "start_time": run.start_time,
        "end_time": run.end_time,
        "artifact_uri": run.artifact_uri,
        "lifecycle_stage": "active",
    }


def _run_id_of(body: dict[str, Any]) -> str:
    """`run_id`, or the older `run_uuid` MLflow still accepts."""
    return str(body.get("run_id") or body.get("run_uuid") or "")


@router.get("/api/2.0/mlflow/runs/get")
async def mlflow_run(request: Request) -> dict[str, Any]:
    mlflow = workspace_state(request).mlflow
    params = await get_params(request)
    run = mlflow.get(params.get("run_id") or params.get("run_uuid") or "")
    return {
        "run": {
            "info": _info_json(run),
            "data": {
                "metrics": [m.to_json() for m in mlflow.latest_metrics(run.run_id)],
                "params": mlflow.params(run.run_id),
                "tags": mlflow.tags(run.run_id),
            },
        }
    }


@router.post("/api/2.0/mlflow/runs/log-metric")
async def log_metric(request: Request) -> dict[str, Any]:
    body = await json_body(request)
    workspace_state(request).mlflow.log(_run_id_of(body), metrics=[body])
    return {}


@router.post("/api/2.0/mlflow/runs/log-parameter")
async def log_parameter(request: Request) -> dict[str, Any]:
    body = await json_body(request)
    workspace_state(request).mlflow.log(_run_id_of(body), params=[body])
    return {}


@router.post("/api/2.0/mlflow/runs/set-tag")
async def set_tag(request: Request) -> dict[str, Any]:
    body = await json_body(request)
    workspace_state(request).mlflow.log(_run_id_of(body), tags=[body])
    return {}


@router.post("/api/2.0/mlflow/runs/log-batch")
async def log_batch(request: Request) -> dict[str, Any]:
    body = await json_body(request)
    workspace_state(request).mlflow.log(
        _run_id_of(body),
        metrics=body.get("metrics") or [],
        params=body.get("params") or [],
        tags=body.get("tags") or [],
    )
    return {}


@router.post("/api/2.0/mlflow/runs/update")
async def update_run(request: Request) -> dict[str, Any]:
    body = await json_body(request)
    run = workspace_state(request).mlflow.update(
        _run_id_of(body), body.get("status"), body.get("end_time"), body.get("run_name")
    )
    return {"run_info": _info_json(run)}


# metrics/get-history pages: MLflow's default and largest page.
_HISTORY_PAGE = 25_000


@router.get("/api/2.0/mlflow/metrics/get-history")
async def metric_history(request: Request) -> dict[str, Any]:
    mlflow = workspace_state(request).mlflow
    params = await get_params(request)
    run_id = params.get("run_id") or params.get("run_uuid") or ""
    mlflow.task_of(run_id)  # an unknown run is 404 whatever else is wrong
    key = params.get("metric_key") or ""
    if not key:
        raise invalid("metric_key is required.")
    limit = _HISTORY_PAGE
    if params.get("max_results"):
        limit = max(1, min(int_param(params["max_results"], "max_results"), _HISTORY_PAGE))
    after = 0
    if params.get("page_token"):
        after = int_param(params["page_token"], "page_token")
    points, next_seq = mlflow.history(run_id, key, after, limit)
    answer: dict[str, Any] = {"metrics": [p.to_json() for p in points]}
    if next_seq:
        answer["next_page_token"] = str(next_seq)
    return answer


@router.get("/api/2.0/mlflow/artifacts/list")
async def list_artifacts(request: Request) -> dict[str, Any]:
    mlflow = workspace_state(request).mlflow
    params = await get_params(request)
    run = mlflow.get(params.get("run_id") or "")
    files = await asyncio.to_thread(mlflow.artifacts, run.task, params.get("path") or "")
    return {"root_uri": run.artifact_uri, "files": files}


def _signature(run_id: str, path: str, expires: int) -> str:
    message = f"{run_id}\0{path}\0{expires}".encode()
    return hmac.new(_SIGNING_KEY, message, hashlib.sha256).hexdigest()


@router.get("/api/2.0/mlflow/artifacts/credentials-for-read")
async def credentials_for_read(request: Request) -> dict[str, Any]:
    state = workspace_state(request)
    params = await get_params(request)
    run_id, path = params.get("run_id") or "", (params.get("path") or "").strip("/")
    state.mlflow.task_of(run_id)
    if not CHUNK_PATH_RE.match(path):
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
    mlflow = workspace_state(request).mlflow
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
    task = mlflow.task_of(run_id)
    chunk = await asyncio.to_thread(mlflow.artifact, task, path)
    return Response(chunk, media_type="text/plain; charset=utf-8")
