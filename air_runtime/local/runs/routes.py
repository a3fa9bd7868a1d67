"""One-time runs of the Jobs API (`/api/2.1|2.2/jobs/runs/*`): submit, get, get-output,
cancel, list and repair, kept by `Runs` and run by the `RunEngine`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from air_runtime.local._errors import invalid
from air_runtime.local._request_params import (
    flag,
    get_params,
    host_url,
    int_param,
    json_body,
    make_page_token,
    read_page_token,
    workspace_state,
)
from air_runtime.local._store import TaskRun
from air_runtime.local.runs.run_json import repair_history, run_json, task_json

router = APIRouter()

_MAX_LIST_LIMIT = 25  # as the platform: runs/list pages hold 1..25 runs


@router.post("/api/2.2/jobs/runs/submit")
@router.post("/api/2.1/jobs/runs/submit")
async def runs_submit(request: Request) -> dict[str, Any]:
    body = await json_body(request)
    run_id = await workspace_state(request).runs.submit(body, host_url(request))
    return {"run_id": run_id}


def _run_id_param(params: dict[str, str]) -> int:
    value = params.get("run_id")
    if value is None:
        raise invalid("run_id is required.")
    return int_param(value, "run_id")


@router.get("/api/2.2/jobs/runs/get")
@router.get("/api/2.1/jobs/runs/get")
async def runs_get(request: Request) -> dict[str, Any]:
    state = workspace_state(request)
    params = await get_params(request)
    found = state.runs.find(_run_id_param(params))
    host = host_url(request)
    if isinstance(found, TaskRun):
        return task_json(found, state.runs.spec_of(found), host)
    offset = int_param(params.get("page_token") or 0, "page_token")
    tasks = state.runs.tasks(found.run_id)
    history = None
    if flag(params.get("include_history")):
        history = repair_history(found, tasks, state.runs.repairs(found.run_id))
    return {
        **run_json(found, host, tasks=tasks, task_offset=offset, history=history),
        "creator_user_name": state.options.user_name,
    }


@router.post("/api/2.2/jobs/runs/repair")
@router.post("/api/2.1/jobs/runs/repair")
async def runs_repair(request: Request) -> dict[str, Any]:
    # Jobs API "Repair a job run" (docs.databricks.com/api/workspace/jobs/repairrun).
    state = workspace_state(request)
    body = await json_body(request)
    run_id = int_param(body.get("run_id"), "run_id")
    rerun = body.get("rerun_tasks") or []
    if not isinstance(rerun, list) or not all(isinstance(k, str) for k in rerun):
        raise invalid("rerun_tasks must be a list of task keys.")
    latest = body.get("latest_repair_id")
    repair_id = state.runs.repair(
        run_id,
        rerun,
        all_failed=bool(body.get("rerun_all_failed_tasks")),
        dependents=bool(body.get("rerun_dependent_tasks")),
        latest_repair_id=None if latest is None else int_param(latest, "latest_repair_id"),
    )
    return {"repair_id": repair_id}


@router.get("/api/2.2/jobs/runs/get-output")
@router.get("/api/2.1/jobs/runs/get-output")
async def runs_get_output(request: Request) -> dict[str, Any]:
    state = workspace_state(request)
    task = state.runs.output_of(_run_id_param(await get_params(request)))
    metadata = task_json(task, state.runs.spec_of(task), host_url(request))
    return {**task.output, "metadata": metadata}


@router.post("/api/2.2/jobs/runs/cancel")
@router.post("/api/2.1/jobs/runs/cancel")
async def runs_cancel(request: Request) -> dict[str, Any]:
    body = await json_body(request)
    workspace_state(request).runs.cancel(int_param(body.get("run_id"), "run_id"))
    return {}


@router.get("/api/2.2/jobs/runs/list")
@router.get("/api/2.1/jobs/runs/list")
async def runs_list(request: Request) -> dict[str, Any]:
    state = workspace_state(request)
    params = await get_params(request)
    active_only = flag(params.get("active_only"))
    completed_only = flag(params.get("completed_only"))
    if active_only and completed_only:
        raise invalid("active_only and completed_only cannot both be true.")
    limit = int_param(params.get("limit") or 25, "limit")
    if not 1 <= limit <= _MAX_LIST_LIMIT:
        raise invalid(f"limit must be between 1 and {_MAX_LIST_LIMIT}, got {limit}.")
    run_type = params.get("run_type")
    if run_type and run_type != "SUBMIT_RUN":
        return {"runs": [], "has_more": False}
    before = read_page_token(params.get("page_token"))
    start_times = [
        int_param(params[name], name) if params.get(name) else None
        for name in ("start_time_from", "start_time_to")
    ]
    runs, has_more = state.runs.newest(
        active_only=active_only,
        completed_only=completed_only,
        before_run_id=before,
        start_time_from=start_times[0],
        start_time_to=start_times[1],
        limit=limit,
    )
    host = host_url(request)
    expand = flag(params.get("expand_tasks"))
    result: dict[str, Any] = {
        "runs": [
            {
                **run_json(r, host, tasks=state.runs.tasks(r.run_id) if expand else None),
                "creator_user_name": state.options.user_name,
            }
            for r in runs
        ],
        "has_more": has_more,
    }
    if has_more:
        result["next_page_token"] = make_page_token(runs[-1].run_id)
    return result
