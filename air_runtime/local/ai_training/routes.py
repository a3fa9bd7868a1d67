"""AI Runtime services: workload validation (`ai-training/config:validate`), the index of
the caller's runs (`ai-training/workflows`) and the log records of a run's tasks
(`ai-training/workflows/by-run-id/{run_id}/logs`)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request

from air_runtime.local._errors import ApiError, invalid
from air_runtime.local._options import LOG_RECORDS_FEATURE
from air_runtime.local._request_params import (
    flag,
    get_params,
    int_param,
    json_body,
    make_page_token,
    read_page_token,
    workspace_state,
)
from air_runtime.local._store import TaskRun
from air_runtime.local.runs.validation import validate_config

router = APIRouter()


@router.post("/api/2.0/ai-training/config:validate")
async def config_validate(request: Request) -> dict[str, Any]:
    """The service's field errors; paired with an Artifact Registry, also the images the
    submit would refuse (so a dry run learns it before submitting)."""
    state = workspace_state(request)
    body = await json_body(request)
    errors = validate_config(body, state.options.gpu_pools)
    task = body.get("task") if isinstance(body, dict) else None
    if not errors and isinstance(task, dict):
        for reason in await state.catalog_images.missing(task):
            errors.append(
                {"path": "unity_catalog_image_path", "message": reason, "code": "NOT_FOUND"}
            )
    return {"errors": errors}


_WORKFLOWS_PAGE = 100


@router.get("/api/2.0/ai-training/workflows")
async def training_workflows(request: Request) -> dict[str, Any]:
    """The caller's runs, `job_run_id` (a string, as proto3 JSON sends int64) and
    `submit_time` (RFC 3339), newest first, `active_only` honoured, paged with
    `page_token` (aitraining.go, acceptance/air/list). Every run of this workspace is an
    AI Runtime run of its one user."""
    state = workspace_state(request)
    params = await get_params(request)
    runs, more = state.runs.newest(
        active_only=flag(params.get("active_only")),
        before_run_id=read_page_token(params.get("page_token")),
        limit=_WORKFLOWS_PAGE,
    )
    workflows = []
    for run in runs:
        tasks = state.runs.tasks(run.run_id)
        submitted = datetime.fromtimestamp(run.start_time / 1000, UTC)
        item: dict[str, Any] = {
            "job_run_id": str(run.run_id),
            "submit_time": submitted.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "metadata": {"creator_name": state.options.user_name},
        }
        if tasks:
            item["task_run_id"] = str(tasks[-1].task_run_id)
        workflows.append(item)
    result: dict[str, Any] = {"training_workflows": workflows}
    if more:
        result["next_page_token"] = make_page_token(runs[-1].run_id)
    return result


@router.get("/api/2.0/ai-training/workflows/by-run-id/{run_id}/logs")
async def workflow_logs(request: Request, run_id: str) -> dict[str, Any]:
    state = workspace_state(request)
    if LOG_RECORDS_FEATURE in state.options.disabled_features:
        # The log service gated off, as where it is not rolled out; clients read the
        # MLflow log artifacts instead (logs.go fetchLogs, logstream.go).
        raise ApiError(403, "FEATURE_DISABLED", "Log records are not enabled for this workspace.")
    ident = int_param(run_id, "run_id")
    params = await get_params(request)
    found = state.runs.find(ident)
    tasks = [found] if isinstance(found, TaskRun) else state.runs.tasks(ident)
    if params.get("ref.attempt_number"):
        # The CLI asks for one retry attempt with ref.attempt_number (logbricklens.go).
        attempt = int_param(params["ref.attempt_number"], "ref.attempt_number")
        tasks = [t for t in tasks if t.attempt_number == attempt]
    task_run_ids = [t.task_run_id for t in tasks]
    node = int_param(params.get("filter.node_index") or 0, "filter.node_index")
    # `from` and `to` are Unix epoch SECONDS: the CLI sends the run's start second, or
    # time_unix_nano / 1e9 of the last record it printed when following a run, and caps a
    # finished run at the ceiling of its end second (logstream.go, logbricklens.go). A
    # record counts from the first nanosecond of `from` through the last one of `to`.
    start_ns = end_ns = None
    if params.get("from"):
        start_ns = int_param(params["from"], "from") * 1_000_000_000
    if params.get("to"):
        end_ns = (int_param(params["to"], "to") + 1) * 1_000_000_000 - 1
    # A bound past the int64 nanoseconds (e.g. nanoseconds sent as seconds) is the far
    # future: no record is that late (docs/cli-conformance.md item 4).
    start_ns = None if start_ns is None else max(0, min(start_ns, 2**63 - 1))
    end_ns = None if end_ns is None else max(-1, min(end_ns, 2**63 - 1))
    ascending = params.get("ascending", "true").lower() != "false"
    size = int_param(params.get("page_size") or 1000, "page_size")
    if not 1 <= size <= 10_000:
        raise invalid(f"page_size must be between 1 and 10000, got {size}.")
    try:
        # Reading files blocks: never on the event loop.
        page, next_token = await asyncio.to_thread(
            state.logbook.page,
            task_run_ids,
            node,
            start_ns=start_ns,
            end_ns=end_ns,
            ascending=ascending,
            size=size,
            token=params.get("page_token") or None,
        )
    except ValueError as exc:
        raise invalid(str(exc)) from None
    result: dict[str, Any] = {"log_records": page}
    if next_token:
        result["next_page_token"] = next_token
    return result
